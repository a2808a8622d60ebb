//! The frame codec. `docs/protocol.md` is the normative, byte-by-byte description;
//! this module implements it.
//!
//! Decoding is a flyweight over `&[u8]`: [`decode`] returns a [`Frame`] that borrows
//! the input and never allocates. It rejects a length field larger than the caller's
//! `max_frame` as soon as the four length bytes are present, so a reader never has to
//! buffer more than `max_frame` bytes for one frame.
//!
//! Encoding appends to a caller-owned `Vec<u8>` (reused across calls, so steady-state
//! encoding does not allocate).

use std::fmt;

/// Protocol version spoken by this crate.
pub const PROTOCOL_VERSION: u16 = 1;
/// Bytes in every frame header.
pub const HEADER_LEN: usize = 8;
/// Default maximum frame size (header included): 1 MiB.
pub const DEFAULT_MAX_FRAME: u32 = 1 << 20;
/// The most bytes a router → client frame may exceed the router's `max_frame` by: a
/// MESSAGE is the publisher's PUBLISH (at most `max_frame`) plus the DISCARDS field (8)
/// and, from the last-value cache, the CACHED field (8); a DELIVER is the stored
/// guaranteed PUBLISH plus binding, delivery count and message id (16). A client
/// decodes router frames with limit `max_frame + ROUTER_FRAME_OVERHEAD`
/// (docs/protocol.md, "Frame size").
pub const ROUTER_FRAME_OVERHEAD: u32 = 16;
/// Smallest maximum frame size a peer may configure (room for a maximal topic and control frames).
pub const MIN_MAX_FRAME: u32 = 1024;
/// Longest client or router name carried in HELLO / WELCOME.
pub const MAX_NAME_LEN: usize = 64;

/// Bytes of the optional STAMPS block (publisher send, router in, router out).
pub const STAMPS_LEN: usize = 24;

/// Frame kinds (byte 4 of the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Client → router: first frame, names the client and its protocol version.
    Hello = 0x01,
    /// Router → client: handshake accepted.
    Welcome = 0x02,
    /// Either direction: orderly close with a code and reason.
    Close = 0x03,
    /// Router → client: an error, optionally fatal.
    Error = 0x04,
    /// Either direction: keepalive probe.
    Ping = 0x05,
    /// Either direction: keepalive answer.
    Pong = 0x06,
    /// Client → router: the login (user and password, or a token), right after a HELLO
    /// offering [`caps::AUTH`].
    Auth = 0x07,
    /// Router → client, before WELCOME: a multicast stream, its group and topics
    /// (topic resolution; only to a HELLO offering [`caps::MCAST`]).
    McastRoute = 0x08,
    /// Client → router: add a subscription.
    Subscribe = 0x10,
    /// Client → router: remove a subscription.
    Unsubscribe = 0x11,
    /// Router → client: a SUBSCRIBE / UNSUBSCRIBE succeeded.
    Ack = 0x12,
    /// Client → router: publish one message.
    Publish = 0x20,
    /// Router → client: deliver one message.
    Message = 0x21,
    /// Client → router: ask for the router's counters.
    StatsRequest = 0x30,
    /// Router → client: counters as a JSON document.
    StatsReply = 0x31,
    /// Client → router: open this connection as a guaranteed publisher with an identity.
    PubOpen = 0x40,
    /// Router → client: the publisher is open; the last sequence the router stored for it.
    PubOpened = 0x41,
    /// Router → client: guaranteed publishes `first..=last` are durable.
    PubAck = 0x42,
    /// Router → client: one guaranteed publish was refused, with a reason.
    PubNack = 0x43,
    /// Client → router: create, delete, purge, show or list queues.
    QueueRequest = 0x44,
    /// Router → client: the answer to a QUEUE_REQUEST, a JSON document.
    QueueReply = 0x45,
    /// Client → router: consume from a queue.
    Bind = 0x46,
    /// Router → client: a binding exists (active, or standby for an exclusive queue).
    Bound = 0x47,
    /// Router → client: one guaranteed message from a queue.
    Deliver = 0x48,
    /// Client → router: delivered messages `first..=last` of a binding are handled.
    ConsumerAck = 0x49,
    /// Client → router: one delivered message is refused (redeliver or dead-letter).
    ConsumerNack = 0x4A,
    /// Client → router: stop consuming from a binding.
    Unbind = 0x4B,
}

impl Kind {
    /// Maps the header byte to a kind; `None` for an unknown (or reserved) kind.
    pub fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            0x01 => Kind::Hello,
            0x02 => Kind::Welcome,
            0x03 => Kind::Close,
            0x04 => Kind::Error,
            0x05 => Kind::Ping,
            0x06 => Kind::Pong,
            0x07 => Kind::Auth,
            0x08 => Kind::McastRoute,
            0x10 => Kind::Subscribe,
            0x11 => Kind::Unsubscribe,
            0x12 => Kind::Ack,
            0x20 => Kind::Publish,
            0x21 => Kind::Message,
            0x30 => Kind::StatsRequest,
            0x31 => Kind::StatsReply,
            0x40 => Kind::PubOpen,
            0x41 => Kind::PubOpened,
            0x42 => Kind::PubAck,
            0x43 => Kind::PubNack,
            0x44 => Kind::QueueRequest,
            0x45 => Kind::QueueReply,
            0x46 => Kind::Bind,
            0x47 => Kind::Bound,
            0x48 => Kind::Deliver,
            0x49 => Kind::ConsumerAck,
            0x4A => Kind::ConsumerNack,
            0x4B => Kind::Unbind,
            _ => return None,
        })
    }
}

/// Capability bits of HELLO and WELCOME.
pub mod caps {
    /// HELLO: an AUTH frame follows this HELLO; WELCOME: the login was accepted.
    pub const AUTH: u32 = 0x01;
    /// HELLO: the client receives topics the router sends by multicast over multicast
    /// (it is sent MCAST_ROUTE frames before WELCOME, and the router stops sending it
    /// those topics over this connection); WELCOME: granted (docs/multicast.md §10).
    pub const MCAST: u32 = 0x02;
    /// Every bit a version 1 peer may set.
    pub const KNOWN: u32 = AUTH | MCAST;
}

/// Longest user name carried by AUTH.
pub const MAX_USER_LEN: usize = 64;
/// Longest secret (password or token) carried by AUTH.
pub const MAX_SECRET_LEN: usize = 512;
/// The largest AUTH frame: header, method, user length, reserved, user and secret.
pub const MAX_AUTH_LEN: usize = HEADER_LEN + 4 + MAX_USER_LEN + MAX_SECRET_LEN;

/// How an AUTH frame proves who the client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AuthMethod {
    /// A user name and that user's password.
    Password = 1,
    /// A token; it names its user by itself (the user field may be empty).
    Token = 2,
}

/// Flags of PUBLISH and MESSAGE frames (byte 5 of the header).
pub mod flags {
    /// A u64 sequence number follows the header (reserved for guaranteed delivery).
    pub const SEQ: u8 = 0x01;
    /// MESSAGE only: a u64 count of messages discarded for this client before this one.
    pub const DISCARDS: u8 = 0x02;
    /// A 24-byte block of u64 timestamps follows: publisher send, router in, router out.
    pub const STAMPS: u8 = 0x04;
    /// PUBLISH only: a guaranteed publish (persisted, acknowledged with PUB_ACK or
    /// PUB_NACK); requires SEQ and a PUB_OPEN earlier on the connection.
    pub const GUARANTEED: u8 = 0x08;
    /// DELIVER only: this message was delivered before (or may have been, before a
    /// router restart).
    pub const REDELIVERED: u8 = 0x10;
    /// PUBLISH and MESSAGE: a REPLY field follows STAMPS: `u32` correlation id, `u8`
    /// reply topic length, the reply topic. A request names a reply topic; a reply to
    /// it names none (length 0) and carries the request's correlation id. Not with
    /// GUARANTEED. (The same bit on DELIVER is [`REDELIVERED`].)
    pub const REPLY: u8 = 0x10;
    /// MESSAGE only: delivered from the router's last-value cache (an initial image or
    /// a cache query), not live; a `u64` field follows REPLY: when the router received
    /// the original PUBLISH, in nanoseconds since the Unix epoch.
    pub const CACHED: u8 = 0x20;
    /// SUBSCRIBE only: send the cached messages matching the pattern before the ACK,
    /// then live messages (an initial image).
    pub const IMAGE: u8 = 0x01;
    /// SUBSCRIBE only: send the cached messages matching the pattern, then the ACK, and
    /// install no subscription (a one-shot cache query).
    pub const IMAGE_ONLY: u8 = 0x02;
    /// Flags a SUBSCRIBE may carry (one of them at most).
    pub const SUBSCRIBE_ALLOWED: u8 = IMAGE | IMAGE_ONLY;
    /// Flags a PUBLISH may carry.
    pub const PUBLISH_ALLOWED: u8 = SEQ | STAMPS | GUARANTEED | REPLY;
    /// Flags a DELIVER may carry.
    pub const DELIVER_ALLOWED: u8 = SEQ | STAMPS | REDELIVERED;
    /// Flags a version 1 MESSAGE may carry.
    pub const MESSAGE_ALLOWED: u8 = SEQ | DISCARDS | STAMPS | REPLY | CACHED;
    /// ERROR only: the router closes the connection after this frame.
    pub const FATAL: u8 = 0x01;
}

/// Numeric error codes carried by ERROR and CLOSE frames.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u16);

impl ErrorCode {
    /// CLOSE only: orderly close, nothing wrong.
    pub const NORMAL: ErrorCode = ErrorCode(0);
    /// The peer speaks a protocol version this side does not.
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(1);
    /// A frame's body does not match its kind's layout.
    pub const MALFORMED_FRAME: ErrorCode = ErrorCode(2);
    /// A length field exceeds the maximum frame size (or is below the header size).
    pub const FRAME_TOO_LARGE: ErrorCode = ErrorCode(3);
    /// The kind byte names no known frame.
    pub const UNKNOWN_KIND: ErrorCode = ErrorCode(4);
    /// A frame other than HELLO arrived before the handshake, or HELLO arrived twice.
    pub const HANDSHAKE: ErrorCode = ErrorCode(5);
    /// A PUBLISH topic is invalid.
    pub const INVALID_TOPIC: ErrorCode = ErrorCode(6);
    /// A SUBSCRIBE / UNSUBSCRIBE pattern is invalid.
    pub const INVALID_PATTERN: ErrorCode = ErrorCode(7);
    /// The router is at its connection limit.
    pub const TOO_MANY_CLIENTS: ErrorCode = ErrorCode(8);
    /// The client fell too far behind and the policy is to disconnect.
    pub const SLOW_CONSUMER: ErrorCode = ErrorCode(9);
    /// The client stalled: no HELLO in time, or half a frame and no more bytes.
    pub const STALLED: ErrorCode = ErrorCode(10);
    /// A flag or feature this router does not support (yet).
    pub const UNSUPPORTED: ErrorCode = ErrorCode(11);
    /// The router is shutting down.
    pub const SHUTTING_DOWN: ErrorCode = ErrorCode(12);
    /// UNSUBSCRIBE for a pattern the client is not subscribed to.
    pub const NOT_SUBSCRIBED: ErrorCode = ErrorCode(13);
    /// The client holds the maximum number of subscriptions.
    pub const TOO_MANY_SUBSCRIPTIONS: ErrorCode = ErrorCode(14);
    /// A frame kind that this side never accepts in this direction.
    pub const UNEXPECTED_KIND: ErrorCode = ErrorCode(15);
    /// A STATS_REQUEST arrived while the previous STATS_REPLY to the same client was
    /// still unread (queued in the router, not yet written to the socket).
    pub const BUSY: ErrorCode = ErrorCode(16);
    /// A queue request or BIND names a queue that does not exist.
    pub const NO_SUCH_QUEUE: ErrorCode = ErrorCode(17);
    /// A queue create names a queue that exists with a different configuration.
    pub const QUEUE_EXISTS: ErrorCode = ErrorCode(18);
    /// A guaranteed PUBLISH arrived before PUB_OPEN on this connection.
    pub const NOT_OPEN: ErrorCode = ErrorCode(19);
    /// A QUEUE_REQUEST, PUB_OPEN or BIND is invalid (bad name, option or JSON).
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(20);
    /// A CONSUMER_ACK / CONSUMER_NACK / UNBIND names a binding or message this
    /// connection does not hold.
    pub const UNKNOWN_DELIVERY: ErrorCode = ErrorCode(21);
    /// Another connection opened the same publisher identity; this one is closed.
    pub const TAKEN_OVER: ErrorCode = ErrorCode(22);
    /// Guaranteed messaging is unavailable: the router runs without a spool
    /// (`--no-guaranteed`). A spool write that fails is a PUB_NACK `spool-failed` instead.
    pub const SPOOL_UNAVAILABLE: ErrorCode = ErrorCode(23);
    /// Non-fatal: a request (PUBLISH with a REPLY field naming a reply topic) matched
    /// no subscription; `request_id` is the request's correlation id.
    pub const NO_RESPONDERS: ErrorCode = ErrorCode(24);
    /// The login failed (unknown user, wrong password or token, a certificate the
    /// router does not know), or the listener requires one and none was offered, or the
    /// user is at its connection limit.
    pub const AUTH_FAILED: ErrorCode = ErrorCode(25);
    /// The user may not do this (publish to that topic, subscribe to that pattern, ask
    /// for stats, manage or bind that queue); nothing else is affected.
    pub const PERMISSION_DENIED: ErrorCode = ErrorCode(26);

    /// Short, stable name for logs and tools.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "normal",
            1 => "unsupported-version",
            2 => "malformed-frame",
            3 => "frame-too-large",
            4 => "unknown-kind",
            5 => "handshake",
            6 => "invalid-topic",
            7 => "invalid-pattern",
            8 => "too-many-clients",
            9 => "slow-consumer",
            10 => "stalled",
            11 => "unsupported",
            12 => "shutting-down",
            13 => "not-subscribed",
            14 => "too-many-subscriptions",
            15 => "unexpected-kind",
            16 => "busy",
            17 => "no-such-queue",
            18 => "queue-exists",
            19 => "not-open",
            20 => "invalid-request",
            21 => "unknown-delivery",
            22 => "taken-over",
            23 => "spool-unavailable",
            24 => "no-responders",
            25 => "auth-failed",
            26 => "permission-denied",
            _ => "unknown",
        }
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.name(), self.0)
    }
}

/// For a length field that is really text: what the peer probably is. The four bytes
/// of an HTTP answer or request read as a length far outside any frame's.
fn length_hint(len: &u32) -> &'static str {
    match len.to_le_bytes() {
        [b'H', b'T', b'T', b'P'] => {
            " (the peer answered in HTTP: an HTTP server, such as a router's monitoring \
             port, not a tickwire router's client port)"
        }
        [b'G', b'E', b'T', b' ']
        | [b'P', b'O', b'S', b'T']
        | [b'H', b'E', b'A', b'D']
        | [b'P', b'U', b'T', b' ']
        | [b'O', b'P', b'T', b'I']
        | [b'D', b'E', b'L', b'E']
        | [b'P', b'A', b'T', b'C'] => {
            " (an HTTP request: an HTTP client on the router's client port; the monitoring \
             endpoint is the router's --http address)"
        }
        // A TLS record header: handshake (22), version 3.x.
        [0x16, 0x03, 0x00..=0x04, _] => " (a TLS handshake on a port without TLS)",
        _ => "",
    }
}

/// Why bytes could not be decoded as a frame. Every variant maps to an [`ErrorCode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length field is below the header size or above the maximum frame size.
    #[error("frame length {len} outside the allowed range 8..={max}{}", length_hint(.len))]
    BadLength {
        /// Length field as received.
        len: u32,
        /// Maximum frame size in force.
        max: u32,
    },
    /// The kind byte is not a known frame kind.
    #[error("unknown frame kind 0x{0:02x}")]
    UnknownKind(u8),
    /// A flag is set that this kind does not allow.
    #[error("flags 0x{flags:02x} not allowed on {kind:?} frames")]
    BadFlags {
        /// Kind of the frame.
        kind: Kind,
        /// Flags as received.
        flags: u8,
    },
    /// The body is shorter than the kind's fixed fields, or a text field is not UTF-8, or
    /// a reserved field is not zero.
    #[error("malformed {kind:?} frame: {what}")]
    Malformed {
        /// Kind of the frame.
        kind: Kind,
        /// What is wrong, for a person.
        what: &'static str,
    },
    /// A HELLO's client name holds a control character (`char::is_control`: C0, DEL or
    /// C1). The name goes into the router's logs and onto admins' terminals (stats), so
    /// a line break or an escape sequence in it could forge a log line or drive the
    /// terminal. The reason names the character by code point, never the raw character.
    #[error("malformed {kind:?} frame: the name holds control character U+{:04X} at byte {offset}", u32::from(*.ch))]
    ControlInName {
        /// Kind of the frame.
        kind: Kind,
        /// The first control character in the name.
        ch: char,
        /// Its byte offset within the name.
        offset: usize,
    },
}

impl FrameError {
    /// Whether the error already says what the peer is (HTTP, a TLS handshake): a
    /// caller's own guess would contradict it.
    pub fn names_the_peer(&self) -> bool {
        matches!(self, FrameError::BadLength { len, .. } if !length_hint(len).is_empty())
    }

    /// The protocol error code a router answers this decode error with.
    pub fn code(&self) -> ErrorCode {
        match self {
            FrameError::BadLength { .. } => ErrorCode::FRAME_TOO_LARGE,
            FrameError::UnknownKind(_) => ErrorCode::UNKNOWN_KIND,
            FrameError::BadFlags { .. }
            | FrameError::Malformed { .. }
            | FrameError::ControlInName { .. } => ErrorCode::MALFORMED_FRAME,
        }
    }
}

/// In-line timestamps, nanoseconds of the host's monotonic clock (0 = not stamped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamps {
    /// Stamped by the publisher when it encoded the message.
    pub publisher_send: u64,
    /// Stamped by the router when it read the message.
    pub router_in: u64,
    /// Stamped by the router when it queued the message for this subscriber.
    pub router_out: u64,
}

/// A PUBLISH or MESSAGE body: a flyweight over the received bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg<'a> {
    /// Header flags as received.
    pub flags: u8,
    /// Sequence number, when [`flags::SEQ`] is set.
    pub seq: Option<u64>,
    /// Messages discarded for this subscriber just before this one (MESSAGE only).
    pub discarded: u64,
    /// In-line timestamps, when [`flags::STAMPS`] is set.
    pub stamps: Option<Stamps>,
    /// The REPLY field, when [`flags::REPLY`] is set (PUBLISH and MESSAGE only).
    pub reply: Option<ReplyField<'a>>,
    /// MESSAGE from the cache ([`flags::CACHED`]): when the router received the
    /// original PUBLISH, in nanoseconds since the Unix epoch.
    pub cached: Option<u64>,
    /// Topic bytes, not yet validated (see [`crate::topic::validate_topic`]).
    pub topic: &'a [u8],
    /// Application payload.
    pub payload: &'a [u8],
}

/// What a SUBSCRIBE asks of the router's last-value cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Image {
    /// Live messages only (no flag).
    #[default]
    None,
    /// The cached messages matching the pattern, then live ones ([`flags::IMAGE`]).
    ThenLive,
    /// The cached messages only; no subscription is installed ([`flags::IMAGE_ONLY`]).
    Only,
}

/// The REPLY field of a request or a reply ([`flags::REPLY`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyField<'a> {
    /// Chosen by the requester; a reply carries the request's. The router answers a
    /// request that matches no subscription with a non-fatal ERROR
    /// [`ErrorCode::NO_RESPONDERS`] whose request_id is this.
    pub correlation: u32,
    /// A request: the topic to publish the reply to (not yet validated, 1 to 250
    /// bytes). A reply: empty.
    pub to: &'a [u8],
}

impl ReplyField<'_> {
    /// Whether this is a request (it names a reply topic).
    pub fn is_request(&self) -> bool {
        !self.to.is_empty()
    }
}

/// The body of an AUTH frame.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Auth<'a> {
    /// Password or token.
    pub method: AuthMethod,
    /// The user (UTF-8, at most [`MAX_USER_LEN`] bytes; may be empty for a token).
    pub user: &'a str,
    /// The password or token (at most [`MAX_SECRET_LEN`] bytes). Never log it.
    pub secret: &'a [u8],
}

impl fmt::Debug for Auth<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("method", &self.method)
            .field("user", &self.user)
            .field("secret", &format_args!("<{} bytes>", self.secret.len()))
            .finish()
    }
}

/// One decoded frame, borrowing the input buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frame<'a> {
    /// See [`Kind::Hello`].
    Hello {
        /// Protocol version the client speaks.
        version: u16,
        /// Capability bits (0 in version 1).
        capabilities: u32,
        /// Client name, for logs and stats.
        name: &'a str,
    },
    /// See [`Kind::Welcome`].
    Welcome {
        /// Protocol version the router speaks.
        version: u16,
        /// Router-assigned id of this connection.
        client_id: u32,
        /// Largest frame the router accepts.
        max_frame: u32,
        /// Capability bits (0 in version 1).
        capabilities: u32,
        /// Router name.
        name: &'a str,
    },
    /// See [`Kind::Close`].
    Close {
        /// Why the connection closes ([`ErrorCode::NORMAL`] for an orderly close).
        code: ErrorCode,
        /// Human-readable reason.
        reason: &'a str,
    },
    /// See [`Kind::Error`].
    Error {
        /// Request the error answers (0 when it answers no request).
        request_id: u32,
        /// What went wrong.
        code: ErrorCode,
        /// The router closes the connection after this frame.
        fatal: bool,
        /// Human-readable detail.
        text: &'a str,
    },
    /// See [`Kind::Auth`]. Its `Debug` shows the secret's length, never its bytes.
    Auth(Auth<'a>),
    /// See [`Kind::Ping`].
    Ping(u64),
    /// See [`Kind::Pong`].
    Pong(u64),
    /// See [`Kind::Subscribe`].
    Subscribe {
        /// Echoed in the ACK or ERROR.
        request_id: u32,
        /// Pattern bytes, not yet validated.
        pattern: &'a [u8],
        /// Whether cached messages are asked for ([`flags::IMAGE`],
        /// [`flags::IMAGE_ONLY`]).
        image: Image,
    },
    /// See [`Kind::Unsubscribe`].
    Unsubscribe {
        /// Echoed in the ACK or ERROR.
        request_id: u32,
        /// Pattern bytes, not yet validated.
        pattern: &'a [u8],
    },
    /// See [`Kind::Ack`].
    Ack {
        /// The request acknowledged.
        request_id: u32,
    },
    /// See [`Kind::Publish`].
    Publish(Msg<'a>),
    /// See [`Kind::Message`].
    Message(Msg<'a>),
    /// See [`Kind::StatsRequest`].
    StatsRequest {
        /// Echoed in the reply.
        request_id: u32,
    },
    /// See [`Kind::StatsReply`].
    StatsReply {
        /// The request answered.
        request_id: u32,
        /// Counters as a JSON document (see `docs/protocol.md`).
        json: &'a str,
    },
    /// See [`Kind::PubOpen`].
    PubOpen {
        /// Echoed in PUB_OPENED or ERROR.
        request_id: u32,
        /// [`crate::gm::open_options`] bits.
        options: u32,
        /// Publisher identity (1 to 64 bytes): duplicates are detected per identity.
        name: &'a str,
    },
    /// See [`Kind::PubOpened`].
    PubOpened {
        /// The PUB_OPEN answered.
        request_id: u32,
        /// Most guaranteed publishes the router accepts unacknowledged.
        window: u32,
        /// Highest sequence number the router holds from this identity (0: none).
        last_seq: u64,
    },
    /// See [`Kind::PubAck`].
    PubAck {
        /// First sequence number acknowledged.
        first: u64,
        /// Last sequence number acknowledged (inclusive).
        last: u64,
    },
    /// See [`Kind::PubNack`].
    PubNack {
        /// The refused publish.
        seq: u64,
        /// Why.
        reason: crate::gm::NackReason,
        /// Detail for a person.
        text: &'a str,
    },
    /// See [`Kind::QueueRequest`].
    QueueRequest {
        /// Echoed in QUEUE_REPLY or ERROR.
        request_id: u32,
        /// What to do.
        op: crate::gm::QueueOp,
        /// The queue name (delete, purge, show), a JSON queue definition (create), or
        /// empty (list).
        arg: &'a str,
    },
    /// See [`Kind::QueueReply`].
    QueueReply {
        /// The request answered.
        request_id: u32,
        /// The answer as a JSON document.
        json: &'a str,
    },
    /// See [`Kind::Bind`].
    Bind {
        /// Echoed in BOUND or ERROR.
        request_id: u32,
        /// Most deliveries unacknowledged at once on this binding (≥ 1).
        window: u32,
        /// Where a replay starts.
        start: crate::gm::Start,
        /// The queue.
        queue: &'a str,
    },
    /// See [`Kind::Bound`].
    Bound {
        /// The BIND answered (0: a standby binding became active).
        request_id: u32,
        /// Binding id, named by DELIVER, CONSUMER_ACK/NACK and UNBIND.
        binding: u32,
        /// Deliveries flow (false: standby of an exclusive queue).
        active: bool,
    },
    /// See [`Kind::Deliver`].
    Deliver(crate::gm::Delivery<'a>),
    /// See [`Kind::ConsumerAck`].
    ConsumerAck {
        /// The binding.
        binding: u32,
        /// First message id acknowledged.
        first: u64,
        /// Last message id acknowledged (inclusive).
        last: u64,
    },
    /// See [`Kind::ConsumerNack`].
    ConsumerNack {
        /// The binding.
        binding: u32,
        /// Redeliver or dead-letter.
        action: crate::gm::NackAction,
        /// The message.
        msg_id: u64,
    },
    /// See [`Kind::Unbind`].
    Unbind {
        /// Echoed in ACK or ERROR.
        request_id: u32,
        /// The binding to end.
        binding: u32,
    },
    /// See [`Kind::McastRoute`].
    McastRoute(crate::mcast_route::McastRoute<'a>),
}

/// Reads the length field of the frame at the start of `buf`.
///
/// `Ok(None)`: fewer than 4 bytes. An error when the length is out of range, so the
/// caller can reject the frame before buffering it.
#[inline]
pub fn frame_len(buf: &[u8], max_frame: u32) -> Result<Option<usize>, FrameError> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
    if (len as usize) < HEADER_LEN || len > max_frame {
        return Err(FrameError::BadLength {
            len,
            max: max_frame,
        });
    }
    Ok(Some(len as usize))
}

/// Decodes the frame at the start of `buf`.
///
/// Returns `Ok(None)` when `buf` holds only part of a frame, `Ok(Some((frame, n)))`
/// with the number of bytes it used, or an error for bytes that can never become a
/// valid frame (the connection should then be closed).
///
/// The data path's frames (a complete PUBLISH or MESSAGE) take a short, inlined path
/// to the same checks ([`decode_msg`]) and the same answer; every other frame, and any
/// buffer holding less than a whole frame, goes through [`decode_any`].
#[inline]
pub fn decode(buf: &[u8], max_frame: u32) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    if let Some(head) = buf.first_chunk::<HEADER_LEN>() {
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let kind = match head[4] {
            k if k == Kind::Publish as u8 => Some(Kind::Publish),
            k if k == Kind::Message as u8 => Some(Kind::Message),
            _ => None,
        };
        // The conditions under which `decode_any` reaches `decode_body` with this
        // kind: a length in range and the whole frame in `buf`.
        if let (Some(kind), true) = (kind, len as usize >= HEADER_LEN && len <= max_frame) {
            if let Some(frame) = buf.get(..len as usize) {
                return decode_msg(kind, frame).map(|f| Some((f, len as usize)));
            }
        }
    }
    decode_any(buf, max_frame)
}

/// A whole MESSAGE frame without flags (header, topic, payload: what a plain PUBLISH is
/// delivered as), read as [`decode`] reads it: `Some((topic, payload))` exactly when
/// `decode(frame, max_frame)` gives a [`Frame::Message`] without flags that uses all of
/// `frame`; `None` for anything else, which [`decode`] then answers. A receiver's
/// shortcut for the common message.
#[inline]
pub fn plain_message(frame: &[u8], max_frame: u32) -> Option<(&[u8], &[u8])> {
    match plain_at(Kind::Message, frame, max_frame) {
        Some((len, topic, payload)) if len == frame.len() => Some((topic, payload)),
        _ => None,
    }
}

/// The whole PUBLISH without flags (header, topic, payload) at the start of `buf`, as
/// [`decode`] reads it: `Some((len, topic, payload))` exactly when `decode(buf,
/// max_frame)` gives a [`Frame::Publish`] without flags, of `len` bytes; `None` for
/// anything else (another frame, flags, a frame not whole yet, an error), which
/// [`decode`] then answers. The router's shortcut for the common publish.
#[inline]
pub fn plain_publish(buf: &[u8], max_frame: u32) -> Option<(usize, &[u8], &[u8])> {
    plain_at(Kind::Publish, buf, max_frame)
}

#[inline(always)]
fn plain_at(kind: Kind, buf: &[u8], max_frame: u32) -> Option<(usize, &[u8], &[u8])> {
    let head = buf.first_chunk::<HEADER_LEN>()?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    if head[4] != kind as u8 || head[5] != 0 || (len as usize) < HEADER_LEN || len > max_frame {
        return None;
    }
    let frame = buf.get(..len as usize)?;
    let topic_len = usize::from(u16::from_le_bytes([head[6], head[7]]));
    if topic_len == 0 {
        return None;
    }
    let (topic, payload) = frame[HEADER_LEN..].split_at_checked(topic_len)?;
    Some((frame.len(), topic, payload))
}

/// [`decode`] without the short path: every frame kind, partial buffers, errors.
#[inline(never)]
pub fn decode_any(buf: &[u8], max_frame: u32) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    let Some(len) = frame_len(buf, max_frame)? else {
        return Ok(None);
    };
    if buf.len() < HEADER_LEN {
        // The kind byte is checked as early as possible too.
        if let Some(&k) = buf.get(4) {
            Kind::from_u8(k).ok_or(FrameError::UnknownKind(k))?;
        }
        return Ok(None);
    }
    let kind = Kind::from_u8(buf[4]).ok_or(FrameError::UnknownKind(buf[4]))?;
    let Some(frame) = buf.get(..len) else {
        return Ok(None);
    };
    decode_body(kind, frame).map(|f| Some((f, len)))
}

/// The body of a whole PUBLISH or MESSAGE frame (`kind` is one of the two): the
/// header checks [`decode_body`] applies to these kinds, in its order, then the fields.
/// Both [`decode`]'s short path and `decode_body` use it, so they cannot disagree.
#[inline(always)]
fn decode_msg(kind: Kind, frame: &[u8]) -> Result<Frame<'_>, FrameError> {
    debug_assert!(matches!(kind, Kind::Publish | Kind::Message));
    let fl = frame[5];
    let aux = u16::from_le_bytes([frame[6], frame[7]]);
    let mut r = Reader {
        kind,
        rest: &frame[HEADER_LEN..],
    };
    if kind == Kind::Publish {
        if fl & !flags::PUBLISH_ALLOWED != 0 {
            return Err(FrameError::BadFlags { kind, flags: fl });
        }
        if fl & flags::GUARANTEED != 0 && fl & flags::SEQ == 0 {
            return Err(r.malformed("a guaranteed publish must carry SEQ"));
        }
        if fl & flags::GUARANTEED != 0 && fl & flags::REPLY != 0 {
            return Err(r.malformed("a guaranteed publish cannot be a request or reply"));
        }
        let m = r.message(fl, aux)?;
        // Sequence numbers count from 1 (PUB_OPENED's last_seq starts at 0, and the
        // router takes any number up to the identity's floor for a resend: a 0 would be
        // acknowledged and stored nowhere), and stop short of 2^64-1 (after it nothing
        // is left to number the next publish with).
        if fl & flags::GUARANTEED != 0 && matches!(m.seq, Some(0 | u64::MAX)) {
            return Err(
                r.malformed("a guaranteed publish's sequence number must be from 1 to 2^64-2")
            );
        }
        Ok(Frame::Publish(m))
    } else {
        if fl & !flags::MESSAGE_ALLOWED != 0 {
            return Err(FrameError::BadFlags { kind, flags: fl });
        }
        Ok(Frame::Message(r.message(fl, aux)?))
    }
}

fn decode_body(kind: Kind, frame: &[u8]) -> Result<Frame<'_>, FrameError> {
    if matches!(kind, Kind::Publish | Kind::Message) {
        return decode_msg(kind, frame);
    }
    let fl = frame[5];
    let aux = u16::from_le_bytes([frame[6], frame[7]]);
    let mut r = Reader {
        kind,
        rest: &frame[HEADER_LEN..],
    };
    let allowed = match kind {
        Kind::Publish => flags::PUBLISH_ALLOWED,
        Kind::Message => flags::MESSAGE_ALLOWED,
        Kind::Deliver => flags::DELIVER_ALLOWED,
        Kind::Error => flags::FATAL,
        Kind::Subscribe => flags::SUBSCRIBE_ALLOWED,
        _ => 0,
    };
    if fl & !allowed != 0 {
        return Err(FrameError::BadFlags { kind, flags: fl });
    }
    if kind == Kind::Publish && fl & flags::GUARANTEED != 0 && fl & flags::SEQ == 0 {
        return Err(r.malformed("a guaranteed publish must carry SEQ"));
    }
    if kind == Kind::Subscribe && fl == flags::SUBSCRIBE_ALLOWED {
        return Err(r.malformed("IMAGE and IMAGE_ONLY together"));
    }
    if kind == Kind::Publish && fl & flags::GUARANTEED != 0 && fl & flags::REPLY != 0 {
        return Err(r.malformed("a guaranteed publish cannot be a request or reply"));
    }
    if aux != 0 && !matches!(kind, Kind::Publish | Kind::Message | Kind::Deliver) {
        return Err(r.malformed("reserved header field is not zero"));
    }
    let frame = match kind {
        Kind::Hello => {
            let version = r.u16()?;
            r.zero16()?;
            let capabilities = r.u32()?;
            let name = r.client_name()?;
            Frame::Hello {
                version,
                capabilities,
                name,
            }
        }
        Kind::Welcome => {
            let version = r.u16()?;
            r.zero16()?;
            let client_id = r.u32()?;
            let max_frame = r.u32()?;
            let capabilities = r.u32()?;
            let name = r.name()?;
            Frame::Welcome {
                version,
                client_id,
                max_frame,
                capabilities,
                name,
            }
        }
        Kind::Close => {
            let code = ErrorCode(r.u16()?);
            Frame::Close {
                code,
                reason: r.text()?,
            }
        }
        Kind::Error => {
            let request_id = r.u32()?;
            let code = ErrorCode(r.u16()?);
            Frame::Error {
                request_id,
                code,
                fatal: fl & flags::FATAL != 0,
                text: r.text()?,
            }
        }
        Kind::Auth => {
            let [method, user_len] = r.take::<2>()?;
            let method = match method {
                1 => AuthMethod::Password,
                2 => AuthMethod::Token,
                _ => return Err(r.malformed("unknown AUTH method")),
            };
            r.zero16()?;
            let user_len = usize::from(user_len);
            if user_len > MAX_USER_LEN {
                return Err(r.malformed("user name longer than 64 bytes"));
            }
            let Some((user, secret)) = r.rest.split_at_checked(user_len) else {
                return Err(r.malformed("user name length exceeds frame"));
            };
            let user =
                std::str::from_utf8(user).map_err(|_| r.malformed("user name is not UTF-8"))?;
            if secret.len() > MAX_SECRET_LEN {
                return Err(r.malformed("secret longer than 512 bytes"));
            }
            Frame::Auth(Auth {
                method,
                user,
                secret,
            })
        }
        Kind::Ping => Frame::Ping(r.u64_exact()?),
        Kind::Pong => Frame::Pong(r.u64_exact()?),
        Kind::Subscribe | Kind::Unsubscribe => {
            let request_id = r.u32()?;
            let pattern = r.rest;
            if kind == Kind::Subscribe {
                let image = if fl & flags::IMAGE_ONLY != 0 {
                    Image::Only
                } else if fl & flags::IMAGE != 0 {
                    Image::ThenLive
                } else {
                    Image::None
                };
                Frame::Subscribe {
                    request_id,
                    pattern,
                    image,
                }
            } else {
                Frame::Unsubscribe {
                    request_id,
                    pattern,
                }
            }
        }
        Kind::Ack => {
            let request_id = r.u32()?;
            r.end()?;
            Frame::Ack { request_id }
        }
        Kind::StatsRequest => {
            let request_id = r.u32()?;
            r.end()?;
            Frame::StatsRequest { request_id }
        }
        Kind::StatsReply => {
            let request_id = r.u32()?;
            Frame::StatsReply {
                request_id,
                json: r.text()?,
            }
        }
        Kind::PubOpen => {
            let request_id = r.u32()?;
            let options = r.u32()?;
            if options & !crate::gm::open_options::ALL != 0 {
                return Err(r.malformed("unknown PUB_OPEN option"));
            }
            let name = r.name()?;
            if name.is_empty() {
                return Err(r.malformed("empty publisher name"));
            }
            Frame::PubOpen {
                request_id,
                options,
                name,
            }
        }
        Kind::PubOpened => {
            let request_id = r.u32()?;
            let window = r.u32()?;
            let last_seq = r.u64_exact()?;
            Frame::PubOpened {
                request_id,
                window,
                last_seq,
            }
        }
        Kind::PubAck => {
            let first = r.u64()?;
            let last = r.u64_exact()?;
            if first > last {
                return Err(r.malformed("first sequence after last"));
            }
            Frame::PubAck { first, last }
        }
        Kind::PubNack => {
            let seq = r.u64()?;
            let reason = crate::gm::NackReason(r.u16()?);
            Frame::PubNack {
                seq,
                reason,
                text: r.text()?,
            }
        }
        Kind::QueueRequest => {
            let request_id = r.u32()?;
            let op = crate::gm::QueueOp::from_u16(r.u16()?)
                .ok_or_else(|| r.malformed("unknown queue operation"))?;
            r.zero16()?;
            Frame::QueueRequest {
                request_id,
                op,
                arg: r.text()?,
            }
        }
        Kind::QueueReply => {
            let request_id = r.u32()?;
            Frame::QueueReply {
                request_id,
                json: r.text()?,
            }
        }
        Kind::Bind => {
            let request_id = r.u32()?;
            let window = r.u32()?;
            if window == 0 {
                return Err(r.malformed("window of 0"));
            }
            let how = r.u16()?;
            r.zero16()?;
            r.zero16()?;
            r.zero16()?;
            let value = r.u64()?;
            let start = crate::gm::Start::from_parts(how, value).ok_or_else(|| {
                r.malformed(if how <= 1 {
                    "a start position of queue or beginning takes a value of 0"
                } else {
                    "unknown start position"
                })
            })?;
            let queue = r.name()?;
            if queue.is_empty() {
                return Err(r.malformed("empty queue name"));
            }
            Frame::Bind {
                request_id,
                window,
                start,
                queue,
            }
        }
        Kind::Bound => {
            let request_id = r.u32()?;
            let binding = r.u32()?;
            let active = match r.u32()? {
                0 => false,
                1 => true,
                _ => return Err(r.malformed("active is neither 0 nor 1")),
            };
            r.end()?;
            Frame::Bound {
                request_id,
                binding,
                active,
            }
        }
        Kind::ConsumerAck => {
            let binding = r.u32()?;
            if r.u32()? != 0 {
                return Err(r.malformed("reserved field is not zero"));
            }
            let first = r.u64()?;
            let last = r.u64_exact()?;
            if first > last {
                return Err(r.malformed("first message id after last"));
            }
            Frame::ConsumerAck {
                binding,
                first,
                last,
            }
        }
        Kind::ConsumerNack => {
            let binding = r.u32()?;
            let action = crate::gm::NackAction::from_u32(r.u32()?)
                .ok_or_else(|| r.malformed("unknown nack action"))?;
            let msg_id = r.u64_exact()?;
            Frame::ConsumerNack {
                binding,
                action,
                msg_id,
            }
        }
        Kind::McastRoute => Frame::McastRoute(
            crate::mcast_route::decode_body(r.rest).map_err(|what| r.malformed(what))?,
        ),
        Kind::Unbind => {
            let request_id = r.u32()?;
            let binding = r.u32()?;
            r.end()?;
            Frame::Unbind {
                request_id,
                binding,
            }
        }
        Kind::Deliver => {
            let binding = r.u32()?;
            let delivery_count = r.u32()?;
            let msg_id = r.u64()?;
            let m = r.message(fl, aux)?;
            Frame::Deliver(crate::gm::Delivery {
                binding,
                msg_id,
                delivery_count,
                redelivered: fl & flags::REDELIVERED != 0,
                seq: m.seq,
                stamps: m.stamps,
                topic: m.topic,
                payload: m.payload,
            })
        }
        // Taken by the test above; kept total without a panic path.
        Kind::Publish | Kind::Message => return decode_msg(kind, frame),
    };
    Ok(frame)
}

struct Reader<'a> {
    kind: Kind,
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn malformed(&self, what: &'static str) -> FrameError {
        FrameError::Malformed {
            kind: self.kind,
            what,
        }
    }
    #[inline(always)]
    fn take<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        match self.rest.split_first_chunk::<N>() {
            Some((head, tail)) => {
                self.rest = tail;
                Ok(*head)
            }
            None => Err(self.malformed("body shorter than its fixed fields")),
        }
    }
    /// The optional fields (in flag order: SEQ, DISCARDS, STAMPS), then the topic of
    /// `aux` bytes, then the payload to the end: the tail of PUBLISH, MESSAGE and DELIVER.
    // Always inlined: built in its caller's frame, the `Msg` is written once. Called
    // out of line, it went back through the stack and its caller's wide reloads of
    // the narrow stores stalled (store forwarding): a third of the receiving client's
    // decode time in `perf` (BENCHMARKS.md, issue 15).
    #[inline(always)]
    fn message(&mut self, fl: u8, aux: u16) -> Result<Msg<'a>, FrameError> {
        let seq = if fl & flags::SEQ != 0 {
            Some(self.u64()?)
        } else {
            None
        };
        let discarded = if fl & flags::DISCARDS != 0 {
            self.u64()?
        } else {
            0
        };
        let stamps = if fl & flags::STAMPS != 0 {
            Some(Stamps {
                publisher_send: self.u64()?,
                router_in: self.u64()?,
                router_out: self.u64()?,
            })
        } else {
            None
        };
        // DELIVER uses the bit for REDELIVERED: its tail has no REPLY field.
        let reply = if fl & flags::REPLY != 0 && self.kind != Kind::Deliver {
            let correlation = self.u32()?;
            let [len] = self.take::<1>()?;
            let Some((to, rest)) = self.rest.split_at_checked(usize::from(len)) else {
                return Err(self.malformed("reply topic length exceeds frame"));
            };
            self.rest = rest;
            Some(ReplyField { correlation, to })
        } else {
            None
        };
        let cached = if fl & flags::CACHED != 0 && self.kind == Kind::Message {
            Some(self.u64()?)
        } else {
            None
        };
        let topic_len = aux as usize;
        if topic_len == 0 {
            return Err(self.malformed("empty topic"));
        }
        let Some(topic) = self.rest.get(..topic_len) else {
            return Err(self.malformed("topic length exceeds frame"));
        };
        Ok(Msg {
            flags: fl,
            seq,
            discarded,
            stamps,
            reply,
            cached,
            topic,
            payload: &self.rest[topic_len..],
        })
    }

    fn u16(&mut self) -> Result<u16, FrameError> {
        self.take::<2>().map(u16::from_le_bytes)
    }
    fn zero16(&mut self) -> Result<(), FrameError> {
        match self.u16()? {
            0 => Ok(()),
            _ => Err(self.malformed("reserved field is not zero")),
        }
    }
    #[inline(always)]
    fn u32(&mut self) -> Result<u32, FrameError> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    #[inline(always)]
    fn u64(&mut self) -> Result<u64, FrameError> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    fn u64_exact(&mut self) -> Result<u64, FrameError> {
        let v = self.u64()?;
        self.end()?;
        Ok(v)
    }
    fn end(&self) -> Result<(), FrameError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(self.malformed("trailing bytes after the body"))
        }
    }
    fn text(&mut self) -> Result<&'a str, FrameError> {
        let t = std::str::from_utf8(self.rest).map_err(|_| self.malformed("text is not UTF-8"))?;
        self.rest = &[];
        Ok(t)
    }
    fn name(&mut self) -> Result<&'a str, FrameError> {
        if self.rest.len() > MAX_NAME_LEN {
            return Err(self.malformed("name longer than 64 bytes"));
        }
        self.text()
    }
    /// A HELLO's client name: [`Reader::name`] without control characters (they would
    /// reach the router's log lines and terminals showing stats).
    fn client_name(&mut self) -> Result<&'a str, FrameError> {
        let name = self.name()?;
        match name.char_indices().find(|(_, c)| c.is_control()) {
            None => Ok(name),
            Some((offset, ch)) => Err(FrameError::ControlInName {
                kind: self.kind,
                ch,
                offset,
            }),
        }
    }
}

// ---------------------------------------------------------------------------------
// Encoding

/// Why a frame could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The frame would exceed the maximum frame size.
    #[error("frame of {len} bytes exceeds the maximum frame size {max}")]
    TooLarge {
        /// Encoded length.
        len: usize,
        /// Maximum in force.
        max: u32,
    },
    /// A topic is longer than a frame's topic-length field allows.
    #[error("topic of {0} bytes is too long")]
    TopicTooLong(usize),
    /// A user name or secret is longer than AUTH carries.
    #[error("{0} longer than {1} bytes")]
    CredentialTooLong(&'static str, usize),
}

/// Writes a header and returns the offset of the frame start (to patch the length).
#[inline]
pub(crate) fn begin(out: &mut Vec<u8>, kind: Kind, fl: u8, aux: u16) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, kind as u8, fl]);
    out.extend_from_slice(&aux.to_le_bytes());
    start
}

#[inline]
pub(crate) fn finish(out: &mut [u8], start: usize) {
    let len = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

pub(crate) fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Appends a HELLO (no capabilities). Names longer than 64 bytes are truncated.
pub fn encode_hello(out: &mut Vec<u8>, version: u16, name: &str) {
    encode_hello_caps(out, version, 0, name);
}

/// Appends a WELCOME (no capabilities). Names longer than 64 bytes are truncated.
pub fn encode_welcome(out: &mut Vec<u8>, client_id: u32, max_frame: u32, name: &str) {
    encode_welcome_caps(out, client_id, max_frame, 0, name);
}

/// Longest text carried by CLOSE and ERROR frames (longer text is truncated).
pub const MAX_TEXT_LEN: usize = 512;

/// Appends a CLOSE.
pub fn encode_close(out: &mut Vec<u8>, code: ErrorCode, reason: &str) {
    let s = begin(out, Kind::Close, 0, 0);
    out.extend_from_slice(&code.0.to_le_bytes());
    out.extend_from_slice(truncate_utf8(reason, MAX_TEXT_LEN).as_bytes());
    finish(out, s);
}

/// Appends an ERROR.
pub fn encode_error(out: &mut Vec<u8>, request_id: u32, code: ErrorCode, fatal: bool, text: &str) {
    let s = begin(out, Kind::Error, if fatal { flags::FATAL } else { 0 }, 0);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&code.0.to_le_bytes());
    out.extend_from_slice(truncate_utf8(text, MAX_TEXT_LEN).as_bytes());
    finish(out, s);
}

/// Appends an AUTH frame.
///
/// A user name over [`MAX_USER_LEN`] or a secret over [`MAX_SECRET_LEN`] bytes is
/// refused (truncating a credential would only make the login fail later).
pub fn encode_auth(out: &mut Vec<u8>, auth: &Auth<'_>) -> Result<(), EncodeError> {
    if auth.user.len() > MAX_USER_LEN {
        return Err(EncodeError::CredentialTooLong("user name", MAX_USER_LEN));
    }
    if auth.secret.len() > MAX_SECRET_LEN {
        return Err(EncodeError::CredentialTooLong("secret", MAX_SECRET_LEN));
    }
    let s = begin(out, Kind::Auth, 0, 0);
    // Checked above: at most 64.
    out.extend_from_slice(&[auth.method as u8, auth.user.len() as u8, 0, 0]);
    out.extend_from_slice(auth.user.as_bytes());
    out.extend_from_slice(auth.secret);
    finish(out, s);
    Ok(())
}

/// Appends a HELLO with capability bits (see [`caps`]).
pub fn encode_hello_caps(out: &mut Vec<u8>, version: u16, capabilities: u32, name: &str) {
    let s = begin(out, Kind::Hello, 0, 0);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&capabilities.to_le_bytes());
    out.extend_from_slice(truncate_utf8(name, MAX_NAME_LEN).as_bytes());
    finish(out, s);
}

/// Appends a WELCOME granting capability bits (see [`caps`]).
pub fn encode_welcome_caps(
    out: &mut Vec<u8>,
    client_id: u32,
    max_frame: u32,
    capabilities: u32,
    name: &str,
) {
    let s = begin(out, Kind::Welcome, 0, 0);
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&client_id.to_le_bytes());
    out.extend_from_slice(&max_frame.to_le_bytes());
    out.extend_from_slice(&capabilities.to_le_bytes());
    out.extend_from_slice(truncate_utf8(name, MAX_NAME_LEN).as_bytes());
    finish(out, s);
}

/// Appends a PING.
pub fn encode_ping(out: &mut Vec<u8>, token: u64) {
    let s = begin(out, Kind::Ping, 0, 0);
    out.extend_from_slice(&token.to_le_bytes());
    finish(out, s);
}

/// Appends a PONG.
pub fn encode_pong(out: &mut Vec<u8>, token: u64) {
    let s = begin(out, Kind::Pong, 0, 0);
    out.extend_from_slice(&token.to_le_bytes());
    finish(out, s);
}

/// Appends a SUBSCRIBE.
pub fn encode_subscribe(out: &mut Vec<u8>, request_id: u32, pattern: &str) {
    encode_request(out, Kind::Subscribe, request_id, pattern.as_bytes());
}

/// Appends a SUBSCRIBE asking for cached messages per `image`.
pub fn encode_subscribe_image(out: &mut Vec<u8>, request_id: u32, pattern: &str, image: Image) {
    let fl = match image {
        Image::None => 0,
        Image::ThenLive => flags::IMAGE,
        Image::Only => flags::IMAGE_ONLY,
    };
    let s = begin(out, Kind::Subscribe, fl, 0);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(pattern.as_bytes());
    finish(out, s);
}

/// Appends an UNSUBSCRIBE.
pub fn encode_unsubscribe(out: &mut Vec<u8>, request_id: u32, pattern: &str) {
    encode_request(out, Kind::Unsubscribe, request_id, pattern.as_bytes());
}

/// Appends an ACK.
pub fn encode_ack(out: &mut Vec<u8>, request_id: u32) {
    encode_request(out, Kind::Ack, request_id, &[]);
}

/// Appends a STATS_REQUEST.
pub fn encode_stats_request(out: &mut Vec<u8>, request_id: u32) {
    encode_request(out, Kind::StatsRequest, request_id, &[]);
}

/// Appends a STATS_REPLY.
pub fn encode_stats_reply(out: &mut Vec<u8>, request_id: u32, json: &str) {
    encode_request(out, Kind::StatsReply, request_id, json.as_bytes());
}

fn encode_request(out: &mut Vec<u8>, kind: Kind, request_id: u32, body: &[u8]) {
    let s = begin(out, kind, 0, 0);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(body);
    finish(out, s);
}

/// Options of one PUBLISH.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishOptions {
    /// Carry a sequence number ([`flags::SEQ`]).
    pub seq: Option<u64>,
    /// Carry a STAMPS block with this publisher-send time (router fills in the rest).
    pub publisher_send: Option<u64>,
}

/// Appends a PUBLISH. The topic is not validated here (the router does).
pub fn encode_publish(
    out: &mut Vec<u8>,
    topic: &str,
    payload: &[u8],
    opts: PublishOptions,
    max_frame: u32,
) -> Result<(), EncodeError> {
    encode_publish_reply(out, topic, payload, opts, None, max_frame)
}

/// Appends a PUBLISH with a REPLY field: a request (`reply.to` names the reply topic,
/// at most 255 bytes) or a reply (`reply.to` empty). Topics are not validated here.
pub fn encode_publish_reply(
    out: &mut Vec<u8>,
    topic: &str,
    payload: &[u8],
    opts: PublishOptions,
    reply: Option<ReplyField<'_>>,
    max_frame: u32,
) -> Result<(), EncodeError> {
    let topic_len =
        u16::try_from(topic.len()).map_err(|_| EncodeError::TopicTooLong(topic.len()))?;
    let reply_len = match reply {
        Some(r) => u8::try_from(r.to.len()).map_err(|_| EncodeError::TopicTooLong(r.to.len()))?,
        None => 0,
    };
    let mut fl = 0;
    let mut len = HEADER_LEN + topic.len() + payload.len();
    if opts.seq.is_some() {
        fl |= flags::SEQ;
        len += 8;
    }
    if opts.publisher_send.is_some() {
        fl |= flags::STAMPS;
        len += STAMPS_LEN;
    }
    if reply.is_some() {
        fl |= flags::REPLY;
        len += 5 + usize::from(reply_len);
    }
    if len > max_frame as usize {
        return Err(EncodeError::TooLarge {
            len,
            max: max_frame,
        });
    }
    out.reserve(len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&[Kind::Publish as u8, fl]);
    out.extend_from_slice(&topic_len.to_le_bytes());
    if let Some(seq) = opts.seq {
        out.extend_from_slice(&seq.to_le_bytes());
    }
    if let Some(t) = opts.publisher_send {
        out.extend_from_slice(&t.to_le_bytes());
        out.extend_from_slice(&[0; 16]);
    }
    if let Some(r) = reply {
        out.extend_from_slice(&r.correlation.to_le_bytes());
        out.push(reply_len);
        out.extend_from_slice(r.to);
    }
    out.extend_from_slice(topic.as_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// Appends the MESSAGE a router delivers for a PUBLISH frame `publish` (the exact
/// bytes of a frame [`decode`] accepted as [`Frame::Publish`]).
///
/// The copy is a `memcpy` plus a kind patch; with `discarded > 0` the DISCARDS field is
/// inserted; when the publish carries STAMPS, `router_in` and `router_out` are written
/// into it. Returns the number of bytes appended.
#[inline]
pub fn encode_message_from_publish(
    out: &mut Vec<u8>,
    publish: &[u8],
    discarded: u64,
    router_in: u64,
    router_out: u64,
) -> usize {
    let start = out.len();
    let fl = publish[5] & !flags::GUARANTEED;
    if discarded == 0 {
        out.extend_from_slice(publish);
        out[start + 4] = Kind::Message as u8;
        out[start + 5] = fl;
    } else {
        let len = publish.len() as u32 + 8;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&[Kind::Message as u8, fl | flags::DISCARDS]);
        out.extend_from_slice(&publish[6..8]);
        let mut rest = &publish[HEADER_LEN..];
        if fl & flags::SEQ != 0 {
            out.extend_from_slice(&rest[..8]);
            rest = &rest[8..];
        }
        out.extend_from_slice(&discarded.to_le_bytes());
        out.extend_from_slice(rest);
    }
    if fl & flags::STAMPS != 0 {
        let mut at = start + HEADER_LEN + 8; // publisher_send
        if fl & flags::SEQ != 0 {
            at += 8;
        }
        if discarded != 0 {
            at += 8;
        }
        out[at..at + 8].copy_from_slice(&router_in.to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&router_out.to_le_bytes());
    }
    out.len() - start
}

/// Appends the MESSAGE the router delivers from its cache for the PUBLISH frame
/// `publish` (exact bytes of a decoded PUBLISH): a copy with the kind patched,
/// GUARANTEED cleared, and the CACHED field (`published_unix_ns`) inserted after the
/// other optional fields. Returns the number of bytes appended.
pub fn encode_cached_message(out: &mut Vec<u8>, publish: &[u8], published_unix_ns: u64) -> usize {
    let start = out.len();
    let Ok(Some((Frame::Publish(p), n))) = decode(publish, u32::MAX) else {
        return 0;
    };
    let publish = &publish[..n];
    // Topic and payload end the frame: the optional fields end where they begin.
    let at = n - p.topic.len() - p.payload.len();
    let len = (n + 8) as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.push(Kind::Message as u8);
    out.push((publish[5] & !flags::GUARANTEED) | flags::CACHED);
    out.extend_from_slice(&publish[6..at]);
    out.extend_from_slice(&published_unix_ns.to_le_bytes());
    out.extend_from_slice(&publish[at..]);
    out.len() - start
}

/// Adds `more` to the DISCARDS count of the MESSAGE frame `frame` (exact frame bytes)
/// if it already carries one; returns false if it has no DISCARDS field.
pub fn add_discards(frame: &mut [u8], more: u64) -> bool {
    if frame.len() < HEADER_LEN || frame[5] & flags::DISCARDS == 0 {
        return false;
    }
    let at = HEADER_LEN + if frame[5] & flags::SEQ != 0 { 8 } else { 0 };
    let Some(field) = frame.get_mut(at..at + 8) else {
        return false;
    };
    let old = u64::from_le_bytes(field.try_into().unwrap_or([0; 8]));
    field.copy_from_slice(&old.saturating_add(more).to_le_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: u32 = DEFAULT_MAX_FRAME;

    fn one(buf: &[u8]) -> Frame<'_> {
        let (f, n) = decode(buf, MAX).unwrap().unwrap();
        assert_eq!(n, buf.len());
        f
    }

    #[test]
    fn a_length_that_is_really_http_or_tls_says_so() {
        let err = |head: &[u8; 4]| {
            FrameError::BadLength {
                len: u32::from_le_bytes(*head),
                max: 80,
            }
            .to_string()
        };
        assert!(
            err(b"HTTP").contains("answered in HTTP"),
            "{}",
            err(b"HTTP")
        );
        assert!(err(b"GET ").contains("an HTTP request"), "{}", err(b"GET "));
        let named = |head: &[u8; 4]| {
            FrameError::BadLength {
                len: u32::from_le_bytes(*head),
                max: 80,
            }
            .names_the_peer()
        };
        assert!(named(b"HTTP") && named(b"GET ") && named(&[0x16, 3, 1, 2]));
        assert!(!named(&[0xff, 0xff, 0, 0]));
        assert!(err(&[0x16, 3, 1, 2]).contains("TLS handshake"));
        assert_eq!(
            err(&[0, 0, 0x10, 0]),
            "frame length 1048576 outside the allowed range 8..=80"
        );
    }

    #[test]
    fn control_frames_round_trip() {
        let mut b = Vec::new();
        encode_hello(&mut b, 1, "feed-1");
        assert_eq!(
            one(&b),
            Frame::Hello {
                version: 1,
                capabilities: 0,
                name: "feed-1"
            }
        );
        b.clear();
        encode_welcome(&mut b, 7, 4096, "r");
        assert_eq!(
            one(&b),
            Frame::Welcome {
                version: PROTOCOL_VERSION,
                client_id: 7,
                max_frame: 4096,
                capabilities: 0,
                name: "r"
            }
        );
        b.clear();
        encode_error(&mut b, 9, ErrorCode::INVALID_PATTERN, true, "bad");
        assert_eq!(
            one(&b),
            Frame::Error {
                request_id: 9,
                code: ErrorCode::INVALID_PATTERN,
                fatal: true,
                text: "bad"
            }
        );
        b.clear();
        encode_close(&mut b, ErrorCode::NORMAL, "bye");
        assert_eq!(
            one(&b),
            Frame::Close {
                code: ErrorCode::NORMAL,
                reason: "bye"
            }
        );
        for (enc, want) in [
            (encode_ping as fn(&mut Vec<u8>, u64), Frame::Ping(5)),
            (encode_pong, Frame::Pong(5)),
        ] {
            b.clear();
            enc(&mut b, 5);
            assert_eq!(one(&b), want);
        }
        b.clear();
        encode_subscribe(&mut b, 3, "md/>");
        assert_eq!(
            one(&b),
            Frame::Subscribe {
                request_id: 3,
                pattern: b"md/>",
                image: Image::None,
            }
        );
        b.clear();
        encode_stats_reply(&mut b, 4, "{}");
        assert_eq!(
            one(&b),
            Frame::StatsReply {
                request_id: 4,
                json: "{}"
            }
        );
    }

    #[test]
    fn golden_publish_bytes() {
        let mut b = Vec::new();
        encode_publish(&mut b, "a/b", b"hi", PublishOptions::default(), MAX).unwrap();
        assert_eq!(
            b,
            [13, 0, 0, 0, 0x20, 0, 3, 0, b'a', b'/', b'b', b'h', b'i']
        );
    }

    #[test]
    fn message_from_publish_inserts_discards_and_stamps() {
        let mut p = Vec::new();
        let opts = PublishOptions {
            seq: Some(42),
            publisher_send: Some(1000),
        };
        encode_publish(&mut p, "x/y", b"payload", opts, MAX).unwrap();
        for discarded in [0, 17] {
            let mut m = Vec::new();
            let n = encode_message_from_publish(&mut m, &p, discarded, 2000, 3000);
            assert_eq!(n, m.len());
            let Frame::Message(msg) = one(&m) else {
                panic!("not a message")
            };
            assert_eq!(msg.seq, Some(42));
            assert_eq!(msg.discarded, discarded);
            assert_eq!(
                msg.stamps,
                Some(Stamps {
                    publisher_send: 1000,
                    router_in: 2000,
                    router_out: 3000
                })
            );
            assert_eq!(msg.topic, b"x/y");
            assert_eq!(msg.payload, b"payload");
            if discarded > 0 {
                assert!(add_discards(&mut m, 3));
                let Frame::Message(msg) = one(&m) else {
                    panic!()
                };
                assert_eq!(msg.discarded, 20);
            } else {
                assert!(!add_discards(&mut m, 3));
            }
        }
    }

    #[test]
    fn rejects_bad_lengths_before_the_body_arrives() {
        assert_eq!(decode(&[], MAX), Ok(None));
        assert_eq!(decode(&[9, 0, 0], MAX), Ok(None));
        assert!(matches!(
            decode(&[7, 0, 0, 0], MAX),
            Err(FrameError::BadLength { len: 7, .. })
        ));
        assert!(matches!(
            decode(&0xFFFF_FFFFu32.to_le_bytes(), MAX),
            Err(FrameError::BadLength { .. })
        ));
        assert_eq!(
            decode(&[8, 0, 0, 0, 0x7f], MAX),
            Err(FrameError::UnknownKind(0x7f))
        );
    }

    #[test]
    fn rejects_malformed_bodies() {
        // PING with a short body.
        let b = [12, 0, 0, 0, 0x05, 0, 0, 0, 1, 2, 3, 4];
        assert!(matches!(decode(&b, MAX), Err(FrameError::Malformed { .. })));
        // PUBLISH whose topic length runs past the frame.
        let b = [10, 0, 0, 0, 0x20, 0, 9, 0, b'a', b'b'];
        assert!(matches!(decode(&b, MAX), Err(FrameError::Malformed { .. })));
        // PUBLISH with GUARANTEED but no SEQ: malformed.
        let b = [10, 0, 0, 0, 0x20, flags::GUARANTEED, 1, 0, b'a', b'b'];
        let e = decode(&b, MAX).unwrap_err();
        assert_eq!(e.code(), ErrorCode::MALFORMED_FRAME);
        // Hostile-input pass: a guaranteed publish numbered 0 was acknowledged and
        // stored nowhere (the router took it for a resend); 2^64-1 left the identity no
        // number for its next publish. Both are malformed; 1 and 2^64-2 are not, and a
        // plain publish may carry any SEQ.
        for (seq, guaranteed, ok) in [
            (0, true, false),
            (u64::MAX, true, false),
            (1, true, true),
            (u64::MAX - 1, true, true),
            (0, false, true),
            (u64::MAX, false, true),
        ] {
            let mut b = Vec::new();
            let opts = PublishOptions {
                seq: Some(seq),
                ..PublishOptions::default()
            };
            encode_publish(&mut b, "ab", b"x", opts, MAX).unwrap();
            if guaranteed {
                b[5] |= flags::GUARANTEED;
            }
            match decode(&b, MAX) {
                Ok(Some((Frame::Publish(_), _))) => assert!(ok, "seq {seq} taken"),
                Err(e) => {
                    assert!(!ok, "seq {seq} refused: {e}");
                    assert_eq!(e.code(), ErrorCode::MALFORMED_FRAME);
                    assert!(e.to_string().contains("from 1 to 2^64-2"), "{e}");
                }
                other => panic!("seq {seq}: {other:?}"),
            }
        }
        // PUBLISH with DISCARDS (router-only flag).
        let b = [
            18,
            0,
            0,
            0,
            0x20,
            flags::DISCARDS,
            1,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            b'a',
            b'b',
        ];
        assert!(matches!(decode(&b, MAX), Err(FrameError::BadFlags { .. })));
        // Non-zero reserved aux on a control frame.
        let b = [16, 0, 0, 0, 0x05, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(matches!(decode(&b, MAX), Err(FrameError::Malformed { .. })));
    }

    #[test]
    fn byte_at_a_time_decodes_the_same() {
        let mut b = Vec::new();
        encode_hello(&mut b, 1, "c");
        encode_publish(&mut b, "t", b"xyz", PublishOptions::default(), MAX).unwrap();
        encode_ping(&mut b, 1);
        let mut frames = 0;
        let mut start = 0;
        for end in 0..=b.len() {
            if let Some((_, n)) = decode(&b[start..end], MAX).unwrap() {
                start += n;
                frames += 1;
            }
        }
        assert_eq!((frames, start), (3, b.len()));
    }

    /// Bytes that look like a PUBLISH or MESSAGE header (any flags, topic length and
    /// length field, often the true one) over any body, or anything at all.
    fn msg_like_frame() -> impl Strategy<Value = (Vec<u8>, u32)> {
        let framed = (
            prop::sample::select(vec![0x20u8, 0x21, 0x22, 0x48]),
            any::<u8>(),
            0u16..40,
            proptest::collection::vec(any::<u8>(), 0..120),
            prop_oneof![3 => Just(None), 1 => (0u32..200).prop_map(Some)],
        )
            .prop_map(|(kind, flags, aux, body, len)| {
                let len = len.unwrap_or((HEADER_LEN + body.len()) as u32);
                let mut b = len.to_le_bytes().to_vec();
                b.extend_from_slice(&[kind, flags]);
                b.extend_from_slice(&aux.to_le_bytes());
                b.extend_from_slice(&body);
                b
            });
        (
            prop_oneof![3 => framed, 1 => proptest::collection::vec(any::<u8>(), 0..64)],
            prop_oneof![Just(MAX), 8u32..160],
        )
    }

    #[test]
    fn the_plain_shortcuts_take_a_plain_frame_and_nothing_else() {
        let mut b = Vec::new();
        encode_publish(&mut b, "md/x", b"hello", PublishOptions::default(), MAX).unwrap();
        let len = b.len();
        b.extend_from_slice(b"next frame");
        assert_eq!(
            plain_publish(&b, MAX),
            Some((len, &b"md/x"[..], &b"hello"[..]))
        );
        assert_eq!(plain_publish(&b[..len - 1], MAX), None, "not whole yet");
        assert_eq!(plain_message(&b[..len], MAX), None, "a PUBLISH");
        let mut m = Vec::new();
        encode_message_from_publish(&mut m, &b[..len], 0, 0, 0);
        assert_eq!(plain_message(&m, MAX), Some((&b"md/x"[..], &b"hello"[..])));
        // With a field (SEQ), DISCARDS, or a length over the limit: the decoder's.
        let mut s = Vec::new();
        let seq = PublishOptions {
            seq: Some(1),
            publisher_send: None,
        };
        encode_publish(&mut s, "md/x", b"hello", seq, MAX).unwrap();
        assert_eq!(plain_publish(&s, MAX), None);
        let mut d = Vec::new();
        encode_message_from_publish(&mut d, &b[..len], 3, 0, 0);
        assert_eq!(plain_message(&d, MAX), None);
        assert_eq!(plain_publish(&b, len as u32 - 1), None);
    }

    proptest! {
        #[test]
        fn the_short_path_answers_as_the_full_decoder((bytes, max) in msg_like_frame(), cut in any::<prop::sample::Index>()) {
            prop_assert_eq!(decode(&bytes, max), decode_any(&bytes, max));
            let part = &bytes[..cut.index(bytes.len() + 1)];
            prop_assert_eq!(decode(part, max), decode_any(part, max));
        }

        #[test]
        fn the_plain_message_shortcut_answers_as_decode((mut bytes, max) in msg_like_frame(), plain in any::<bool>()) {
            // Half the frames made plain MESSAGEs (the generator's are mostly not).
            if plain && bytes.len() >= HEADER_LEN {
                bytes[4] = Kind::Message as u8;
                bytes[5] = 0;
            }
            let decoded = decode(&bytes, max);
            match plain_message(&bytes, max) {
                Some((topic, payload)) => {
                    let Ok(Some((Frame::Message(m), n))) = decoded else {
                        panic!("shortcut took what decode answers {decoded:?}");
                    };
                    prop_assert_eq!((m.flags, m.topic, m.payload, n), (0, topic, payload, bytes.len()));
                }
                None => prop_assert!(
                    !matches!(decoded, Ok(Some((Frame::Message(ref m), n))) if m.flags == 0 && n == bytes.len()),
                    "shortcut refused what decode reads as a plain message: {:?}", decoded
                ),
            }
        }

        #[test]
        fn the_plain_publish_shortcut_answers_as_decode((mut bytes, max) in msg_like_frame(), plain in any::<bool>(), cut in any::<prop::sample::Index>()) {
            if plain && bytes.len() >= HEADER_LEN {
                bytes[4] = Kind::Publish as u8;
                bytes[5] = 0;
            }
            let bytes = &bytes[..cut.index(bytes.len() + 1)];
            let decoded = decode(bytes, max);
            match plain_publish(bytes, max) {
                Some((len, topic, payload)) => {
                    let Ok(Some((Frame::Publish(m), n))) = decoded else {
                        panic!("shortcut took what decode answers {decoded:?}");
                    };
                    prop_assert_eq!((m.flags, m.topic, m.payload, n), (0, topic, payload, len));
                }
                None => prop_assert!(
                    !matches!(decoded, Ok(Some((Frame::Publish(ref m), _))) if m.flags == 0),
                    "shortcut refused what decode reads as a plain publish: {:?}", decoded
                ),
            }
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), max in 8u32..512) {
            let _ = decode(&bytes, max);
        }

        #[test]
        fn publish_round_trips(
            topic in "[a-z]{1,8}(/[a-z]{1,8}){0,3}",
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            seq in proptest::option::of(any::<u64>()),
            ts in proptest::option::of(any::<u64>()),
            discarded in any::<u64>(),
            split in any::<prop::sample::Index>(),
        ) {
            let mut b = Vec::new();
            encode_publish(&mut b, &topic, &payload, PublishOptions { seq, publisher_send: ts }, MAX).unwrap();
            let Frame::Publish(p) = one(&b) else { panic!("not a publish") };
            prop_assert_eq!(p.topic, topic.as_bytes());
            prop_assert_eq!(p.payload, &payload[..]);
            prop_assert_eq!(p.seq, seq);
            prop_assert_eq!(p.stamps.map(|s| s.publisher_send), ts);
            // A split anywhere yields "incomplete", never an error.
            let cut = split.index(b.len());
            prop_assert_eq!(decode(&b[..cut], MAX), Ok(None));
            let mut m = Vec::new();
            encode_message_from_publish(&mut m, &b, discarded, 1, 2);
            let Frame::Message(msg) = one(&m) else { panic!("not a message") };
            prop_assert_eq!(msg.topic, topic.as_bytes());
            prop_assert_eq!(msg.payload, &payload[..]);
            prop_assert_eq!(msg.discarded, discarded);
            prop_assert_eq!(msg.seq, seq);
        }

        #[test]
        fn auth_round_trips_and_any_split_is_incomplete(
            token in any::<bool>(),
            user in "[a-zé]{0,20}",
            secret in proptest::collection::vec(any::<u8>(), 0..=MAX_SECRET_LEN),
            split in any::<prop::sample::Index>(),
        ) {
            let method = if token { AuthMethod::Token } else { AuthMethod::Password };
            let a = Auth { method, user: &user, secret: &secret };
            let mut b = Vec::new();
            encode_auth(&mut b, &a).unwrap();
            prop_assert!(b.len() <= MAX_AUTH_LEN);
            prop_assert_eq!(one(&b), Frame::Auth(a));
            let cut = split.index(b.len());
            prop_assert_eq!(decode(&b[..cut], MAX), Ok(None));
        }

        #[test]
        fn request_and_reply_fields_round_trip_through_the_router_copy(
            topic in "[a-z]{1,8}(/[a-z]{1,8}){0,3}",
            reply_to in "([a-z_]{1,8}(/[a-z0-9]{1,8}){0,3})?",
            correlation in any::<u32>(),
            payload in proptest::collection::vec(any::<u8>(), 0..100),
            seq in proptest::option::of(any::<u64>()),
            ts in proptest::option::of(any::<u64>()),
            discarded in 0u64..3,
            split in any::<prop::sample::Index>(),
        ) {
            let mut b = Vec::new();
            let reply = ReplyField { correlation, to: reply_to.as_bytes() };
            let opts = PublishOptions { seq, publisher_send: ts };
            encode_publish_reply(&mut b, &topic, &payload, opts, Some(reply), MAX).unwrap();
            let Frame::Publish(p) = one(&b) else { panic!("not a publish") };
            prop_assert_eq!(p.reply, Some(reply));
            prop_assert_eq!(p.reply.is_some_and(|r| r.is_request()), !reply_to.is_empty());
            prop_assert_eq!(p.topic, topic.as_bytes());
            prop_assert_eq!(p.payload, &payload[..]);
            prop_assert_eq!(p.seq, seq);
            let cut = split.index(b.len());
            prop_assert_eq!(decode(&b[..cut], MAX), Ok(None));
            let mut m = Vec::new();
            encode_message_from_publish(&mut m, &b, discarded, 7, 9);
            let Frame::Message(msg) = one(&m) else { panic!("not a message") };
            prop_assert_eq!(msg.reply, Some(reply));
            prop_assert_eq!(msg.topic, topic.as_bytes());
            prop_assert_eq!(msg.payload, &payload[..]);
            prop_assert_eq!(msg.discarded, discarded);
            prop_assert_eq!(msg.stamps.map(|s| (s.publisher_send, s.router_in, s.router_out)), ts.map(|t| (t, 7, 9)));
        }
    }

    #[test]
    fn auth_bad_input_and_limits() {
        let a = Auth {
            method: AuthMethod::Password,
            user: "alice",
            secret: b"pw",
        };
        let mut good = Vec::new();
        encode_auth(&mut good, &a).unwrap();
        // The example of docs/protocol.md section 4.10.
        assert_eq!(
            good,
            [0x13, 0, 0, 0, 7, 0, 0, 0, 1, 5, 0, 0, b'a', b'l', b'i', b'c', b'e', b'p', b'w']
        );
        let malformed = |b: &[u8]| matches!(decode(b, MAX), Err(FrameError::Malformed { .. }));
        let mut b = good.clone();
        b[8] = 3; // unknown method
        assert!(malformed(&b));
        let mut b = good.clone();
        b[9] = 200; // user longer than the frame
        assert!(malformed(&b));
        let mut b = good.clone();
        b[9] = 65; // over the limit, whatever follows
        b.resize(8 + 4 + 65, b'x');
        let len = b.len() as u32;
        b[..4].copy_from_slice(&len.to_le_bytes());
        assert!(malformed(&b));
        let mut b = good.clone();
        b[10] = 1; // reserved
        assert!(malformed(&b));
        let mut b = good.clone();
        b[12] = 0xff; // user not UTF-8
        assert!(malformed(&b));
        // Too short for the fixed fields.
        assert!(malformed(&[10, 0, 0, 0, 7, 0, 0, 0, 1, 0]));
        // The longest secret decodes; one byte more does not encode or decode.
        let long = vec![7u8; MAX_SECRET_LEN + 1];
        let mut b = Vec::new();
        let a = Auth {
            method: AuthMethod::Token,
            user: "",
            secret: &long[..MAX_SECRET_LEN],
        };
        encode_auth(&mut b, &a).unwrap();
        assert!(matches!(one(&b), Frame::Auth(x) if x.secret.len() == MAX_SECRET_LEN));
        let e = encode_auth(&mut Vec::new(), &Auth { secret: &long, ..a });
        assert_eq!(
            e,
            Err(EncodeError::CredentialTooLong("secret", MAX_SECRET_LEN))
        );
        b.push(7);
        let len = b.len() as u32;
        b[..4].copy_from_slice(&len.to_le_bytes());
        assert!(malformed(&b));
        // Debug never shows the secret.
        let shown = format!("{:?}", one(&good));
        assert!(
            shown.contains("<2 bytes>") && !shown.contains("pw"),
            "{shown}"
        );
    }

    #[test]
    fn hello_capabilities_round_trip() {
        let mut b = Vec::new();
        encode_hello_caps(&mut b, 1, caps::AUTH, "c");
        assert!(matches!(
            one(&b),
            Frame::Hello {
                capabilities: caps::AUTH,
                ..
            }
        ));
        let mut b = Vec::new();
        encode_welcome_caps(&mut b, 3, 1024, caps::AUTH, "r");
        assert!(matches!(
            one(&b),
            Frame::Welcome {
                capabilities: caps::AUTH,
                ..
            }
        ));
    }

    #[test]
    fn request_example_of_protocol_md_5_1() {
        let mut b = Vec::new();
        let r = ReplyField {
            correlation: 7,
            to: b"_reply/3/ab",
        };
        encode_publish_reply(
            &mut b,
            "svc/time",
            b"now",
            PublishOptions::default(),
            Some(r),
            MAX,
        )
        .unwrap();
        let mut want = vec![0x23, 0, 0, 0, 0x20, 0x10, 8, 0, 7, 0, 0, 0, 11];
        want.extend_from_slice(b"_reply/3/absvc/timenow");
        assert_eq!(b, want);
    }

    #[test]
    fn reply_field_bad_input() {
        // A reply topic length past the end of the frame.
        let mut b = Vec::new();
        let r = ReplyField {
            correlation: 1,
            to: b"x/y",
        };
        encode_publish_reply(&mut b, "a", b"", PublishOptions::default(), Some(r), MAX).unwrap();
        // Frame: header 8, correlation 4, len 1, "x/y" 3, topic "a" 1.
        assert_eq!(b.len(), 17);
        b[12] = 200;
        assert!(matches!(decode(&b, MAX), Err(FrameError::Malformed { .. })));
        // The REPLY flag with no room for its field.
        let b = [9, 0, 0, 0, 0x20, flags::REPLY, 1, 0, b'a'];
        assert!(matches!(decode(&b, MAX), Err(FrameError::Malformed { .. })));
        // GUARANTEED | REPLY is refused.
        let mut b = Vec::new();
        let opts = PublishOptions {
            seq: Some(1),
            publisher_send: None,
        };
        encode_publish_reply(&mut b, "a", b"", opts, Some(r), MAX).unwrap();
        b[5] |= flags::GUARANTEED;
        assert!(matches!(decode(&b, MAX), Err(FrameError::Malformed { .. })));
        // A reply topic over 255 bytes cannot be encoded.
        let long = vec![b'x'; 256];
        let r = ReplyField {
            correlation: 1,
            to: &long,
        };
        let e = encode_publish_reply(
            &mut Vec::new(),
            "a",
            b"",
            PublishOptions::default(),
            Some(r),
            MAX,
        );
        assert_eq!(e, Err(EncodeError::TopicTooLong(256)));
        // DELIVER's 0x10 is REDELIVERED, not REPLY: no field is read.
        assert_ne!(flags::DELIVER_ALLOWED & flags::REPLY, 0);
    }
}
