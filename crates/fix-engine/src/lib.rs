//! tickwire FIX engine: a thin, single-threaded TCP driver around the pure FIX
//! session core of `tickwire-fix`.
//!
//! # Shape
//!
//! ```text
//!             one thread, one mio::Poll
//!  ┌────────────────────────────────────────────────────────────────────┐
//!  │ wait (block: until the next session deadline / IO; spin: never)    │
//!  │ accept ─► unbound connection ─► first frame is a Logon? pick the   │
//!  │           session by 8 / 49 / 56 (no match, not a Logon, or the   │
//!  │           session already connected: close, as QuickFIX does)     │
//!  │ read  ─► per-connection buffer ─► frame_len ─► handle_message     │
//!  │ timers ─► handle_timeout for every session past its poll_timeout  │
//!  │ drain every session's outputs:                                     │
//!  │     Send → the connection's write buffer (+ message log, to_app)   │
//!  │     Event → Application callbacks (from_app, on_logon, ...)        │
//!  │     Connect → non-blocking connect; Disconnect → close after flush │
//!  │ store.flush() of every session touched this turn                   │
//!  │ one write() per connection with pending bytes                      │
//!  └────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! * [`Engine`] owns every socket and every [`Session`](tickwire_fix::session::Session);
//!   [`Engine::run`] loops until [`Handle::stop`] / [`Ctx::stop`], [`Engine::turn`]
//!   runs one loop turn (for callers with their own loop).
//! * [`Application`] receives QuickFIX's familiar callbacks with borrowed
//!   [`MessageRef`](tickwire_fix::codec::MessageRef)s. Callbacks that may act get a
//!   [`Ctx`] through which the application sends on ANY session (the tick-to-trade algo
//!   receives `35=X` on one session and sends `35=D` on another) without leaving the
//!   engine thread. Other threads use a [`Handle`] (a bounded queue plus a waker).
//! * Sessions come from a QuickFIX settings file ([`Engine::from_settings`],
//!   [`SessionSpec::from_settings`]) or are built in code ([`SessionSpec::new`]).
//! * The optional message log ([`FileLogPath`](MessageLog)) is written by a background
//!   thread: the engine appends byte copies of messages to a per-turn batch and hands
//!   the batch over once per turn.
//!
//! # Hot path
//!
//! Per message in steady state: no allocation (read/write buffers, the parsed-field
//! tables and the callback scratch buffer are reused and only grow), no lock, no log
//! line, no syscall; syscalls are one `read` per readable connection (until it would
//! block) and one `write` per connection per turn, preceded by one store `flush` per
//! session that changed. A received application message moves from the session's
//! output buffer into the engine's scratch buffer before `from_app` runs, so that the
//! callback may send on its own session: the two buffers are swapped when the event
//! was the session's last output (the steady state), copied otherwise
//! (`Session::take_event_message`).
//!
//! # TLS
//!
//! With `SocketUseSSL=Y` ([`TlsConfig`], built from QuickFIX's SSL settings) every
//! connection runs through rustls' buffered API. The syscall pattern stays the clear
//! path's: one `read` per readable connection per wake (into an engine-wide input
//! buffer, handed to rustls, decrypted into the connection's read buffer) and one
//! vectored `write` of the turn's records per connection. rustls allocates one buffer
//! per TLS record it seals (a turn's messages to one peer go out in as few records as
//! fit 16 KiB), so the TLS path is not allocation-free per turn as the clear path is.
//! A failed handshake (untrusted certificate, clear text on a TLS port) closes that
//! connection only; it is counted and logged with the accept refusals.
//!
//! # Bad input
//!
//! Garbage before a message is skipped up to the next `8=FIX` (as the codec
//! documents); a BodyLength announcing more than
//! [`EngineOptions::max_message_len`] closes that connection only; everything else
//! (CheckSum, BodyLength, messages before Logon, silent peers) is the session core's
//! decision. Nothing on a connection can make the engine panic or touch another
//! connection. A frame whose BodyLength misses its trailer, trickled over many reads,
//! is searched once per byte: the search resumes where the last read left it
//! ([`FrameScan`](tickwire_fix::codec::FrameScan) per connection).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod app;
mod engine;
mod log;
pub mod monitor;
mod spec;
mod store;
mod tls;

pub use app::{Application, Ctx, SessionKey};
pub use engine::{Engine, EngineOptions, Handle, SendError};
pub use log::MessageLog;
pub use monitor::{EngineSnapshot, SessionCounters, SessionState, SessionView};
pub use spec::{DictionaryCache, SessionSpec, StoreSpec};
pub use store::AnyStore;
pub use tickwire_fix::settings::IdleStrategy;
pub use tls::TlsConfig;

use std::path::PathBuf;

/// Errors building or running an [`Engine`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The settings file could not be read or is invalid.
    #[error(transparent)]
    Settings(#[from] tickwire_fix::settings::SettingsError),
    /// A session's configuration is impossible (configuration fault).
    #[error("session {session}: {source}")]
    SessionConfig {
        /// The session.
        session: String,
        /// What is wrong.
        #[source]
        source: tickwire_fix::session::ConfigError,
    },
    /// A data dictionary could not be loaded (configuration fault). The source names
    /// the file.
    #[error("session {session}: data dictionary {source}")]
    Dictionary {
        /// The session.
        session: String,
        /// The dictionary file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: tickwire_fix::dict::DictError,
    },
    /// A message store could not be opened or flushed (IO fault).
    #[error("session {session}: message store: {source}")]
    Store {
        /// The session.
        session: String,
        /// What failed.
        #[source]
        source: tickwire_fix::store::StoreError,
    },
    /// A setting the engine needs is missing or contradictory (configuration fault).
    #[error("session {session}: {reason}")]
    Config {
        /// The session.
        session: String,
        /// What is wrong.
        reason: String,
    },
    /// The TLS settings cannot be used: a file missing or unreadable, a setting
    /// tickwire refuses (configuration fault).
    #[error("TLS: {reason}")]
    Tls {
        /// What is wrong, naming the setting.
        reason: String,
    },
    /// A socket, poll or thread operation failed (IO fault).
    #[error("{op}: {source}")]
    Io {
        /// What we were doing.
        op: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// A fault in the configuration (the settings file, a dictionary or TLS file it
    /// names), as opposed to one of the store or the system: fixing the settings fixes
    /// it, so a command line reports it as a usage error.
    pub fn is_config_fault(&self) -> bool {
        match self {
            Error::Settings(_)
            | Error::SessionConfig { .. }
            | Error::Dictionary { .. }
            | Error::Config { .. }
            | Error::Tls { .. } => true,
            Error::Store { .. } | Error::Io { .. } => false,
        }
    }
}
