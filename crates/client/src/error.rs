//! The client's one error type.

use std::io;
use std::time::Duration;

use tickwire_wire::frame::{EncodeError, ErrorCode};
use tickwire_wire::topic::TopicError;

/// Everything that can go wrong talking to a router.
///
/// Split by fault: the network ([`Error::Connect`], [`Error::Io`], [`Error::Timeout`]),
/// the router ([`Error::Protocol`], [`Error::Rejected`], [`Error::Closed`]) and the
/// caller's input ([`Error::InvalidTopic`], [`Error::InvalidPattern`],
/// [`Error::TooLarge`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The TCP connection to the router could not be established.
    #[error("cannot connect to router at {addr}: {}", connect_hint(.cause))]
    Connect {
        /// The address (or addresses) tried.
        addr: String,
        /// Why the last attempt failed (already phrased in the message, so it is not
        /// reported again as the error's source).
        cause: io::Error,
    },
    /// The router did not answer in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited, for a person ("the router's WELCOME", "ACK", ...).
        what: &'static str,
        /// The configured time limit.
        after: Duration,
    },
    /// Reading from or writing to the socket failed.
    #[error("{}", io_text(.0))]
    Io(#[from] io::Error),
    /// The router sent bytes this client cannot decode, or a frame it never expects.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The router refused a request (non-fatal ERROR); the connection stays open.
    #[error("router rejected the request: {text} ({code})")]
    Rejected {
        /// Why.
        code: ErrorCode,
        /// The router's explanation.
        text: String,
    },
    /// The router closed the connection: CLOSE frame, fatal ERROR, or end of stream.
    ///
    /// An end of stream without a CLOSE frame (the router was killed, crashed, or the
    /// connection was cut) has code [`ErrorCode::NORMAL`] and a reason that says so.
    #[error("{}", closed_text(*.code, .reason))]
    Closed {
        /// Why ([`ErrorCode::NORMAL`] for an orderly close or a plain end of stream).
        code: ErrorCode,
        /// The router's reason.
        reason: String,
    },
    /// A topic passed to `publish` is not a valid publish topic.
    #[error("invalid topic: {0}")]
    InvalidTopic(TopicError),
    /// A pattern passed to `subscribe` / `unsubscribe` is not a valid pattern.
    #[error("invalid pattern: {0}")]
    InvalidPattern(TopicError),
    /// A message does not fit in the router's maximum frame size.
    #[error("message too large for the router: {0}")]
    TooLarge(EncodeError),
    /// A guaranteed publish before `open_publisher` succeeded on this connection.
    #[error("no guaranteed publisher is open on this connection (call open_publisher first)")]
    PublisherNotOpen,
    /// `try_publish_guaranteed` found the publish window full: wait for answers.
    #[error("the guaranteed publish window is full (the router has not answered yet)")]
    WindowFull,
    /// An argument the caller passed is out of range (a name's length, a window, a
    /// range).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A request matched no subscription on the router: nobody can answer it.
    #[error("no responders: no subscriber on the router matches {topic:?}")]
    NoResponders {
        /// The request's topic.
        topic: String,
    },
    /// A [`ReconnectingClient`](crate::ReconnectingClient) is disconnected and its
    /// buffer of publishes made meanwhile is full: this publish was not taken.
    #[error(
        "not connected to the router and the offline publish buffer is full \
         ({limit} bytes, ReconnectOptions::offline_buffer_bytes): publish refused"
    )]
    OfflineBufferFull {
        /// The configured limit in bytes.
        limit: usize,
    },
}

impl Error {
    /// Whether the connection is finished after this error (every later call fails).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. } | Error::Io(_) | Error::Protocol(_) | Error::Closed { .. }
        )
    }
}

/// An I/O error's text; a reset or broken connection says what that means, as an end
/// of stream does (new-user pass: `pub --guaranteed` reported a router killed under it
/// as "Connection reset by peer" where `sub` said the router went away).
fn io_text(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => format!(
            "the router connection was reset (the router stopped, crashed or was killed, \
             or the connection was cut): {e}"
        ),
        _ => format!("I/O error on the router connection: {e}"),
    }
}

/// The reason of an end of stream that no CLOSE frame explained.
pub(crate) const EOF_REASON: &str = "the router closed the socket without a CLOSE frame (it \
     stopped, crashed or was killed, or the connection was cut)";

/// A close's text: the router's code, except for a plain end (`NORMAL`), whose reason
/// says everything (an orderly close, or a connection that ended without a CLOSE).
fn closed_text(code: ErrorCode, reason: &str) -> String {
    if code == ErrorCode::NORMAL {
        format!("connection to the router ended: {reason}")
    } else if reason.replace(' ', "-").contains(code.name()) {
        // "router shutting down (code 12)", not "... (shutting-down (code 12))".
        format!("router closed the connection: {reason} (code {})", code.0)
    } else {
        format!("router closed the connection: {reason} ({code})")
    }
}

/// Phrases the common connect failures the way a person running the tools needs them.
fn connect_hint(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => {
            "connection refused (is `tickwire router` running?)".to_owned()
        }
        io::ErrorKind::TimedOut => "connection timed out".to_owned(),
        // Only a shared-memory handshake socket can be missing or another user's.
        io::ErrorKind::NotFound => {
            "no router listens on that shared-memory name (is `tickwire router --shm NAME` \
             running on this machine?)"
                .to_owned()
        }
        io::ErrorKind::PermissionDenied => {
            "permission denied: a router's shared-memory socket admits only the user it runs \
             as (docs/shm.md)"
                .to_owned()
        }
        // The resolver's own text ("Name or service not known") says nothing of what
        // was wrong with the address.
        _ if e.to_string().contains("lookup address") => format!(
            "not an IP address nor a host name this machine can resolve ({e}); \
             expected HOST:PORT, e.g. 127.0.0.1:7420"
        ),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_connection_says_the_router_went_away() {
        let reset = Error::Io(io::Error::from(io::ErrorKind::ConnectionReset)).to_string();
        assert!(
            reset.starts_with("the router connection was reset (the router stopped"),
            "{reset}"
        );
        let other = Error::Io(io::Error::from(io::ErrorKind::PermissionDenied)).to_string();
        assert!(
            other.starts_with("I/O error on the router connection: "),
            "{other}"
        );
    }

    #[test]
    fn connect_refused_names_the_address_and_the_fix() {
        let e = Error::Connect {
            addr: "127.0.0.1:7420".into(),
            cause: io::ErrorKind::ConnectionRefused.into(),
        };
        assert_eq!(
            e.to_string(),
            "cannot connect to router at 127.0.0.1:7420: connection refused \
             (is `tickwire router` running?)"
        );
        assert!(e.is_fatal());
    }

    #[test]
    fn a_missing_or_foreign_shm_socket_says_what_to_do() {
        let e = Error::Connect {
            addr: "shm:nosuch (/dev/shm/tickwire-nosuch.sock)".into(),
            cause: io::ErrorKind::NotFound.into(),
        };
        assert!(
            e.to_string()
                .ends_with("is `tickwire router --shm NAME` running on this machine?)"),
            "{e}"
        );
        let e = Error::Connect {
            addr: "shm:theirs (/dev/shm/tickwire-theirs.sock)".into(),
            cause: io::ErrorKind::PermissionDenied.into(),
        };
        assert!(e.to_string().contains("only the user it runs as"), "{e}");
    }

    #[test]
    fn messages_name_the_code() {
        let e = Error::Rejected {
            code: ErrorCode::INVALID_PATTERN,
            text: "bad wildcard".into(),
        };
        assert_eq!(
            e.to_string(),
            "router rejected the request: bad wildcard (invalid-pattern (code 7))"
        );
        assert!(!e.is_fatal());
        let e = Error::Closed {
            code: ErrorCode::SLOW_CONSUMER,
            reason: "egress over its limit".into(),
        };
        assert_eq!(
            e.to_string(),
            "router closed the connection: egress over its limit (slow-consumer (code 9))"
        );
        // A reason that already says the code's name is not followed by it again.
        let e = Error::Closed {
            code: ErrorCode::SHUTTING_DOWN,
            reason: "router shutting down".into(),
        };
        assert_eq!(
            e.to_string(),
            "router closed the connection: router shutting down (code 12)"
        );
        // A plain end carries no code worth naming: its reason says what happened.
        let e = Error::Closed {
            code: ErrorCode::NORMAL,
            reason: EOF_REASON.into(),
        };
        assert_eq!(
            e.to_string(),
            "connection to the router ended: the router closed the socket without a CLOSE \
             frame (it stopped, crashed or was killed, or the connection was cut)"
        );
        let e = Error::Timeout {
            what: "ACK",
            after: Duration::from_secs(5),
        };
        assert_eq!(e.to_string(), "timed out after 5s waiting for ACK");
        let e = Error::InvalidTopic(TopicError::Empty);
        assert_eq!(e.to_string(), "invalid topic: empty");
    }
}

/// The most of a text from the router (a CLOSE reason, an ERROR or PUB_NACK text) an
/// error keeps: a peer's megabyte of reason would otherwise reach a terminal whole.
const MAX_PEER_TEXT: usize = 1024;

/// A text the router sent, as an error may show it: control characters escaped (a
/// line break could forge a log line, an escape sequence drive the terminal) and at
/// most [`MAX_PEER_TEXT`] bytes, the cut said.
pub(crate) fn peer_text(text: &str) -> String {
    let safe = tickwire_rt::text::terminal_safe(text);
    if safe.len() <= MAX_PEER_TEXT {
        return safe.into_owned();
    }
    let mut cut = MAX_PEER_TEXT;
    while !safe.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}... ({} bytes in all)", &safe[..cut], text.len())
}

#[cfg(test)]
mod peer_text_tests {
    use super::peer_text;

    /// Hostile-input probe (a fake router): CLOSE and ERROR texts reached the terminal
    /// raw (escape sequences, forged lines) and whole (a 1 MB reason).
    #[test]
    fn a_routers_text_is_escaped_and_bounded() {
        assert_eq!(peer_text("slow consumer"), "slow consumer");
        assert_eq!(
            peer_text("bad \u{1b}[31mred\nforged: line"),
            "bad \\u{1b}[31mred\\nforged: line"
        );
        let long = "x".repeat(1_000_000);
        let t = peer_text(&long);
        assert!(
            t.len() < 1100 && t.ends_with("... (1000000 bytes in all)"),
            "{t}"
        );
        let wide = "é".repeat(1000);
        assert!(peer_text(&wide).contains("(2000 bytes in all)"));
    }
}
