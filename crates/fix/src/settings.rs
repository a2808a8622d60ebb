//! QuickFIX session settings files, accepted as is.
//!
//! # Format (as QuickFIX/C++ `Settings.cpp` / `Dictionary.cpp` read it)
//!
//! * Each line is stripped of leading and trailing whitespace; a UTF-8 byte order mark
//!   at the start of the file (as some Windows editors write) is skipped.
//! * A line starting with `#` is a comment; blank lines are ignored.
//! * `[NAME]` starts a section (the name is stripped). `[DEFAULT]` holds values every
//!   session inherits; each `[SESSION]` is one session. Other section names are ignored
//!   by QuickFIX; we accept them with a warning.
//! * Any other line containing `=` is `Key=Value`, split at the first `=`; key and value
//!   are stripped. Keys are case-insensitive (QuickFIX upper-cases them); the last
//!   occurrence in a section wins. Key/value lines before the first section are ignored
//!   by QuickFIX; we report them as warnings.
//! * Any other line (no `=`, or a `[` without its `]`) is ignored by QuickFIX; we refuse
//!   it with file and line, as an unknown key: `SocketAcceptPort 5001` or `[SESSION`
//!   would otherwise drop settings and fail later, or not at all, far from the typo.
//! * Booleans are `Y` / `N`; numbers are plain digits within the key's range (an error
//!   names the key, the value and the range: `expected an integer in 1..=65535`); days
//!   are matched on their first two letters (`Mo`, `monday`, ...); times are `HH:MM:SS`.
//!
//! A session is identified by BeginString, SenderCompID (+SenderSubID, SenderLocationID),
//! TargetCompID (+TargetSubID, TargetLocationID) and SessionQualifier.
//!
//! # Keys
//!
//! Every key QuickFIX/C++ 1.16 knows (session, socket, store, log and SSL settings) is
//! recognised. The keys tickwire implements are parsed into [`SessionSettings`] with
//! QuickFIX's defaults; known keys we do not implement (database stores and logs,
//! HTTP, logon/logout windows, ...) are accepted and reported as an "ignored" warning;
//! so is `RefreshOnLogon=Y` (tickwire's stores have one owner: nothing to refresh;
//! `RefreshOnLogon=N` is what tickwire does and passes silently).
//! The TLS keys are read from `[DEFAULT]` only (see "Security settings" below). A
//! key QuickFIX does not know is an error with file, line and a "did you mean" suggestion.
//! A few keys from QuickFIX/J that the issue asks for are also implemented:
//! `SenderSubID`, `SenderLocationID`, `TargetSubID`, `TargetLocationID`, `TimeZone`,
//! `SocketAcceptHost`, `ResendRequestChunkSize`.
//!
//! One deliberate default difference: `SocketNodelay` defaults to `Y` (QuickFIX: `N`),
//! because tickwire is a low-latency engine and always wants `TCP_NODELAY`.
//!
//! # tickwire extensions
//!
//! Keys starting with `Tickwire` (QuickFIX never uses that prefix):
//!
//! | key | values | default | meaning |
//! |---|---|---|---|
//! | `TickwireIdleStrategy` | `block` / `spin` | `block` | how the engine waits for IO |
//! | `TickwireStoreSync` | `every` / `batched` / `os` | `os` | [`crate::store::SyncPolicy`] of the file store |
//! | `TickwireStoreSyncBatch` | number >= 1 | `64` | messages per fdatasync with `batched` |
//! | `TickwireMaxLogonLength` | bytes >= 64 | `8192` | longest first message (Logon) an acceptor buffers from a connection that has not logged on; longer closes it |
//! | `TickwireMaxPendingConnections` | number >= 1 | `64` | accepted connections not yet logged on an acceptor keeps at once; a new one at the limit evicts the one that has waited longest |
//!
//! The two limits are engine-wide: the engine takes the largest `TickwireMaxLogonLength`
//! and the smallest `TickwireMaxPendingConnections` of its sessions (set them in
//! `[DEFAULT]`).
//!
//! # Security settings
//!
//! `AllowedRemoteAddresses` (QuickFIX/C++ 1.16 and QuickFIX/J; comma-separated IP
//! addresses, per session) is enforced: an acceptor closes, without
//! a reply, a connection whose Logon names a session that does not list the peer's
//! address (see the engine's docs).
//!
//! TLS: `SocketUseSSL=Y` in `[DEFAULT]` turns it on for every session, with QuickFIX's
//! SSL settings (`ServerCertificateFile`, `CertificationAuthoritiesFile`,
//! `CertificateVerifyLevel`, `SSLProtocol`, ...), read from `[DEFAULT]` only as
//! QuickFIX/C++ reads them ([`TlsSettings`]; a TLS key in a `[SESSION]` is an error).
//! What tickwire's TLS cannot honour (an OpenSSL cipher string, only SSL 3 / TLS 1.0)
//! is refused with [`SettingsError::Tls`] and the reason, never ignored; so is an SSL
//! setting without `SocketUseSSL=Y`, which would otherwise run in clear text.
//!
//! Environment variable substitution (`$VAR`, QuickFIX's optional `resolveEnvVars`) is not
//! supported.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use chrono::{NaiveTime, Weekday};

mod tls;
pub use tls::{protocols as parse_ssl_protocol, TlsSettings, TlsVersions, VerifyLevel};

use crate::codec::TimestampPrecision;
use crate::store::SyncPolicy;

/// Errors reading a settings file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A key QuickFIX does not know.
    #[error("{file}:{line}: unknown setting '{key}'{}", suggestion.as_ref().map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default())]
    UnknownKey {
        /// File name.
        file: String,
        /// 1-based line.
        line: usize,
        /// The key as written.
        key: String,
        /// The closest known key, if close enough.
        suggestion: Option<String>,
    },
    /// A value that does not parse for its key.
    #[error("{file}:{line}: invalid value '{value}' for {key}: expected {expected}")]
    BadValue {
        /// File name.
        file: String,
        /// 1-based line.
        line: usize,
        /// The key (canonical spelling).
        key: &'static str,
        /// The value as written.
        value: String,
        /// What was expected (for a number, the accepted range: `an integer in
        /// 1..=65535`).
        expected: String,
    },
    /// A required key is missing from a session (and from DEFAULT).
    #[error("{file}:{line}: session {session} is missing required setting {key}")]
    Missing {
        /// File name.
        file: String,
        /// Line of the `[SESSION]` header.
        line: usize,
        /// The session (as far as identified).
        session: String,
        /// The missing key and why.
        key: &'static str,
    },
    /// A TLS setting that cannot be honoured as written (see [`TlsSettings`]): refused
    /// rather than ignored or run in clear text.
    #[error("{file}:{line}: {key}={value}: {reason}; refusing to start")]
    Tls {
        /// File name.
        file: String,
        /// 1-based line.
        line: usize,
        /// The key (canonical spelling).
        key: &'static str,
        /// The value as written.
        value: String,
        /// Why, and what to do.
        reason: String,
    },
    /// A line that is neither a comment, a `[SECTION]` header nor `Key=Value`.
    #[error("{file}:{line}: {reason}: {text}")]
    Malformed {
        /// File name.
        file: String,
        /// 1-based line.
        line: usize,
        /// The line as written (stripped).
        text: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Two sessions with the same identity.
    #[error("{file}:{line}: duplicate session {session}")]
    DuplicateSession {
        /// File name.
        file: String,
        /// Line of the second `[SESSION]` header.
        line: usize,
        /// The session.
        session: String,
    },
}

/// Something accepted but worth telling the user (an ignored key or section, a key
/// before any section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsWarning {
    /// File name.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What happened.
    pub message: String,
}

impl std::fmt::Display for SettingsWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

/// Whether tickwire implements a known key.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Support {
    Implemented,
    /// Known to QuickFIX, not implemented: accepted with an "ignored" warning.
    Ignored,
    /// A QuickFIX switch (`Y`/`N`, default `N`) tickwire does not honour, for this
    /// reason: `N` is what tickwire does anyway and passes silently; `Y` is accepted
    /// with an "ignored" warning giving the reason; any other value is an error.
    NotHonoured(&'static str),
    /// A TLS setting: engine-wide, read from `[DEFAULT]` only (module `tls`).
    Tls,
}
use Support::{Ignored, Implemented, NotHonoured, Tls};

/// Every key QuickFIX/C++ 1.16 knows, plus the QuickFIX/J and tickwire keys we implement.
const KEYS: &[(&str, Support)] = &[
    ("BeginString", Implemented),
    ("SenderCompID", Implemented),
    ("SenderSubID", Implemented),
    ("SenderLocationID", Implemented),
    ("TargetCompID", Implemented),
    ("TargetSubID", Implemented),
    ("TargetLocationID", Implemented),
    ("SessionQualifier", Implemented),
    ("DefaultApplVerID", Implemented),
    ("ConnectionType", Implemented),
    ("UseDataDictionary", Implemented),
    ("SendResetSeqNumFlag", Implemented),
    ("SendRedundantResendRequests", Implemented),
    ("SendNextExpectedMsgSeqNum", Implemented),
    ("DataDictionary", Implemented),
    ("TransportDataDictionary", Implemented),
    ("AppDataDictionary", Implemented),
    ("UseLocalTime", Implemented),
    ("TimeZone", Implemented),
    ("StartTime", Implemented),
    ("EndTime", Implemented),
    ("StartDay", Implemented),
    ("EndDay", Implemented),
    ("NonStopSession", Implemented),
    ("LogonTime", Ignored),
    ("LogoutTime", Ignored),
    ("LogonDay", Ignored),
    ("LogoutDay", Ignored),
    ("CheckCompID", Implemented),
    ("CheckLatency", Implemented),
    ("MaxLatency", Implemented),
    ("HeartBtInt", Implemented),
    ("SocketAcceptPort", Implemented),
    ("SocketAcceptHost", Implemented),
    ("SocketReuseAddress", Ignored),
    ("SocketConnectHost", Implemented),
    ("SocketConnectPort", Implemented),
    ("SocketConnectSourceHost", Ignored),
    ("SocketConnectSourcePort", Ignored),
    ("SocketNodelay", Implemented),
    ("SocketSendBufferSize", Ignored),
    ("SocketReceiveBufferSize", Ignored),
    ("HostSelectionPolicy", Ignored),
    ("HostSelectionPolicyPriorityStartOverInterval", Ignored),
    ("ReconnectInterval", Implemented),
    ("ValidateLengthAndChecksum", Implemented),
    ("ValidateFieldsOutOfOrder", Implemented),
    ("ValidateFieldsHaveValues", Implemented),
    ("ValidateUserDefinedFields", Implemented),
    ("AllowUnknownMsgFields", Implemented),
    ("PreserveMessageFieldsOrder", Ignored),
    ("LogonTimeout", Implemented),
    ("LogoutTimeout", Implemented),
    ("ResendRequestChunkSize", Implemented),
    ("FileStorePath", Implemented),
    ("MySQLStoreUseConnectionPool", Ignored),
    ("MySQLStoreDatabase", Ignored),
    ("MySQLStoreUser", Ignored),
    ("MySQLStorePassword", Ignored),
    ("MySQLStoreHost", Ignored),
    ("MySQLStorePort", Ignored),
    ("PostgreSQLStoreUseConnectionPool", Ignored),
    ("PostgreSQLStoreDatabase", Ignored),
    ("PostgreSQLStoreUser", Ignored),
    ("PostgreSQLStorePassword", Ignored),
    ("PostgreSQLStoreHost", Ignored),
    ("PostgreSQLStorePort", Ignored),
    ("OdbcStoreUser", Ignored),
    ("OdbcStorePassword", Ignored),
    ("OdbcStoreConnectionString", Ignored),
    ("FileLogPath", Implemented),
    ("FileLogBackupPath", Ignored),
    ("ScreenLogShowIncoming", Ignored),
    ("ScreenLogShowOutgoing", Ignored),
    ("ScreenLogShowEvents", Ignored),
    ("MySQLLogUseConnectionPool", Ignored),
    ("MySQLLogDatabase", Ignored),
    ("MySQLLogUser", Ignored),
    ("MySQLLogPassword", Ignored),
    ("MySQLLogHost", Ignored),
    ("MySQLLogPort", Ignored),
    ("MySQLLogIncomingTable", Ignored),
    ("MySQLLogOutgoingTable", Ignored),
    ("MySQLLogEventTable", Ignored),
    ("PostgreSQLLogUseConnectionPool", Ignored),
    ("PostgreSQLLogDatabase", Ignored),
    ("PostgreSQLLogUser", Ignored),
    ("PostgreSQLLogPassword", Ignored),
    ("PostgreSQLLogHost", Ignored),
    ("PostgreSQLLogPort", Ignored),
    ("PostgreSQLLogIncomingTable", Ignored),
    ("PostgreSQLLogOutgoingTable", Ignored),
    ("PostgreSQLLogEventTable", Ignored),
    ("OdbcLogUser", Ignored),
    ("OdbcLogPassword", Ignored),
    ("OdbcLogConnectionString", Ignored),
    ("OdbcLogIncomingTable", Ignored),
    ("OdbcLogOutgoingTable", Ignored),
    ("OdbcLogEventTable", Ignored),
    ("ResetOnLogon", Implemented),
    ("ResetOnLogout", Implemented),
    ("ResetOnDisconnect", Implemented),
    (
        "RefreshOnLogon",
        NotHonoured(
            "a tickwire store has one owner (its lock), so there is nothing to refresh \
             at logon",
        ),
    ),
    ("MillisecondsInTimeStamp", Implemented),
    ("TimestampPrecision", Implemented),
    ("HttpAcceptPort", Ignored),
    ("PersistMessages", Implemented),
    ("ServerCertificateFile", Tls),
    ("ServerCertificateKeyFile", Tls),
    ("ClientCertificateFile", Tls),
    ("ClientCertificateKeyFile", Tls),
    ("CertificationAuthoritiesFile", Tls),
    ("CertificationAuthoritiesDirectory", Tls),
    ("CertificateRevocationListFile", Tls),
    ("CertificateRevocationListDirectory", Tls),
    ("CertificateVerifyLevel", Tls),
    ("AllowedRemoteAddresses", Implemented),
    ("SocketUseSSL", Tls),
    ("SSLProtocol", Tls),
    ("SSLCipherSuite", Tls),
    ("TLSCipherSuites", Tls),
    ("TickwireIdleStrategy", Implemented),
    ("TickwireStoreSync", Implemented),
    ("TickwireStoreSyncBatch", Implemented),
    ("TickwireMaxLogonLength", Implemented),
    ("TickwireMaxPendingConnections", Implemented),
];

/// Keys that may carry a numeric suffix (failover hosts: `SocketConnectHost1`, ...).
const NUMBERED: &[&str] = &[
    "SocketConnectHost",
    "SocketConnectPort",
    "SocketConnectSourceHost",
    "SocketConnectSourcePort",
];

/// Canonical spelling and support of `key`, plus the failover number for numbered keys
/// (0 = the primary). `AppDataDictionary.<BeginString>` maps to AppDataDictionary.
fn lookup(key: &str) -> Option<(&'static str, Support, u32)> {
    if let Some(&(k, s)) = KEYS.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)) {
        return Some((k, s, 0));
    }
    for &base in NUMBERED {
        if key.len() > base.len() && key[..base.len()].eq_ignore_ascii_case(base) {
            if let Ok(n) = key[base.len()..].parse::<u32>() {
                let (k, s) = *KEYS.iter().find(|(k, _)| *k == base)?;
                return Some((k, s, n));
            }
        }
    }
    let app = "AppDataDictionary.";
    if key.len() > app.len() && key[..app.len()].eq_ignore_ascii_case(app) {
        return Some(("AppDataDictionary", Implemented, 0));
    }
    None
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_ascii_lowercase().chars().collect();
    let b: Vec<char> = b.to_ascii_lowercase().chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The known key closest to `key`: within a few edits, or one being a prefix of the other
/// (`HeartBtInterval` -> `HeartBtInt`).
fn suggest(key: &str) -> Option<String> {
    let lower = key.to_ascii_lowercase();
    let prefix = KEYS.iter().map(|(k, _)| *k).find(|k| {
        let kl = k.to_ascii_lowercase();
        kl.len() >= 6 && lower.len() >= 6 && (lower.starts_with(&kl) || kl.starts_with(&lower))
    });
    if let Some(k) = prefix {
        return Some(k.to_string());
    }
    let (best, d) = KEYS
        .iter()
        .map(|(k, _)| (*k, edit_distance(key, k)))
        .min_by_key(|&(_, d)| d)?;
    (d <= 2.max(key.len() / 4)).then(|| best.to_string())
}

/// One `Key=Value` as written.
#[derive(Debug, Clone)]
struct Entry {
    value: String,
    line: usize,
}

/// The values of one section, keyed by (canonical key, failover number / dictionary suffix).
#[derive(Debug, Clone, Default)]
struct Section {
    line: usize,
    values: BTreeMap<(&'static str, String), Entry>,
}

/// Whether a session accepts or initiates connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionType {
    /// Listens on SocketAcceptPort.
    Acceptor,
    /// Connects to SocketConnectHost:SocketConnectPort.
    Initiator,
}

/// tickwire extension `TickwireIdleStrategy`: `block` (wait in epoll, the default) or
/// `spin` (busy-poll the sockets). The shared type of every tickwire driver; these
/// settings produce only those two.
pub use tickwire_rt::IdleStrategy;

/// A session's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SessionId {
    /// BeginString (8).
    pub begin_string: String,
    /// SenderCompID (49).
    pub sender_comp_id: String,
    /// SenderSubID (50), empty if none.
    pub sender_sub_id: String,
    /// SenderLocationID (142), empty if none.
    pub sender_location_id: String,
    /// TargetCompID (56).
    pub target_comp_id: String,
    /// TargetSubID (57), empty if none.
    pub target_sub_id: String,
    /// TargetLocationID (143), empty if none.
    pub target_location_id: String,
    /// SessionQualifier, empty if none.
    pub qualifier: String,
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.begin_string, self.sender_comp_id)?;
        for p in [&self.sender_sub_id, &self.sender_location_id] {
            if !p.is_empty() {
                write!(f, "/{p}")?;
            }
        }
        write!(f, "->{}", self.target_comp_id)?;
        for p in [&self.target_sub_id, &self.target_location_id] {
            if !p.is_empty() {
                write!(f, "/{p}")?;
            }
        }
        if !self.qualifier.is_empty() {
            write!(f, ":{}", self.qualifier)?;
        }
        Ok(())
    }
}

/// The typed settings of one session (DEFAULT values inherited). Defaults are QuickFIX's.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSettings {
    /// Identity.
    pub id: SessionId,
    /// Line of the `[SESSION]` header.
    pub line: usize,
    /// ConnectionType.
    pub connection_type: ConnectionType,
    /// HeartBtInt in seconds (required for initiators; acceptors take the peer's).
    pub heartbt_int: Option<u32>,
    /// StartTime (None only for NonStopSession).
    pub start_time: Option<NaiveTime>,
    /// EndTime.
    pub end_time: Option<NaiveTime>,
    /// StartDay (weekly sessions).
    pub start_day: Option<Weekday>,
    /// EndDay.
    pub end_day: Option<Weekday>,
    /// TimeZone (IANA name), for StartTime/EndTime.
    pub time_zone: Option<chrono_tz::Tz>,
    /// UseLocalTime (default N: times are UTC).
    pub use_local_time: bool,
    /// NonStopSession (default N).
    pub non_stop_session: bool,
    /// ReconnectInterval in seconds (default 30).
    pub reconnect_interval: u32,
    /// SocketAcceptPort (required for acceptors).
    pub socket_accept_port: Option<u16>,
    /// SocketAcceptHost (bind address; all interfaces if None).
    pub socket_accept_host: Option<String>,
    /// SocketConnectHost/Port then the numbered failovers 1, 2, ... in order.
    pub socket_connect: Vec<(String, u16)>,
    /// SocketNodelay (default Y, see the module docs).
    pub socket_nodelay: bool,
    /// ResetOnLogon (default N).
    pub reset_on_logon: bool,
    /// ResetOnLogout (default N).
    pub reset_on_logout: bool,
    /// ResetOnDisconnect (default N).
    pub reset_on_disconnect: bool,
    /// SendResetSeqNumFlag (default N).
    pub send_reset_seq_num_flag: bool,
    /// PersistMessages (default Y).
    pub persist_messages: bool,
    /// FileStorePath (memory store if None).
    pub file_store_path: Option<PathBuf>,
    /// FileLogPath (no message log if None).
    pub file_log_path: Option<PathBuf>,
    /// DataDictionary (FIX.4.x).
    pub data_dictionary: Option<PathBuf>,
    /// TransportDataDictionary (FIXT.1.1).
    pub transport_data_dictionary: Option<PathBuf>,
    /// AppDataDictionary, and `AppDataDictionary.<BeginString>` as (suffix, path); the
    /// plain key has an empty suffix.
    pub app_data_dictionaries: Vec<(String, PathBuf)>,
    /// DefaultApplVerID (required for FIXT.1.1), as written (e.g. `FIX.5.0SP2` or `9`).
    pub default_appl_ver_id: Option<String>,
    /// UseDataDictionary (default Y).
    pub use_data_dictionary: bool,
    /// ValidateLengthAndChecksum (default Y).
    pub validate_length_and_checksum: bool,
    /// ValidateFieldsOutOfOrder (default Y).
    pub validate_fields_out_of_order: bool,
    /// ValidateFieldsHaveValues (default Y).
    pub validate_fields_have_values: bool,
    /// ValidateUserDefinedFields (default Y).
    pub validate_user_defined_fields: bool,
    /// AllowUnknownMsgFields (default N).
    pub allow_unknown_msg_fields: bool,
    /// CheckCompID (default Y).
    pub check_comp_id: bool,
    /// CheckLatency (default Y).
    pub check_latency: bool,
    /// MaxLatency in seconds (default 120).
    pub max_latency: u32,
    /// LogonTimeout in seconds (default 10).
    pub logon_timeout: u32,
    /// LogoutTimeout in seconds (default 2).
    pub logout_timeout: u32,
    /// ResendRequestChunkSize (default 0: request everything at once).
    pub resend_request_chunk_size: u32,
    /// SendRedundantResendRequests (default N).
    pub send_redundant_resend_requests: bool,
    /// SendNextExpectedMsgSeqNum (default N): NextExpectedMsgSeqNum (789) in Logons.
    pub send_next_expected_msg_seq_num: bool,
    /// From TimestampPrecision (0-9 digits) or MillisecondsInTimeStamp (default Y);
    /// seconds for FIX.4.0/4.1, as QuickFIX.
    pub timestamp_precision: TimestampPrecision,
    /// TickwireIdleStrategy (default block).
    pub idle_strategy: IdleStrategy,
    /// TickwireStoreSync / TickwireStoreSyncBatch (default os).
    pub store_sync: SyncPolicy,
    /// AllowedRemoteAddresses (acceptors): the peers that may log on to this session;
    /// empty: any peer.
    pub allowed_remote_addresses: Vec<IpAddr>,
    /// TickwireMaxLogonLength: the longest first message (Logon) an acceptor buffers
    /// from a connection not yet logged on (None: the engine's default).
    pub max_logon_length: Option<usize>,
    /// TickwireMaxPendingConnections: accepted connections not yet logged on that an
    /// acceptor keeps at once (None: the engine's default).
    pub max_pending_connections: Option<usize>,
}

/// A parsed settings file.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The sessions, in file order.
    pub sessions: Vec<SessionSettings>,
    /// TLS for every session (`SocketUseSSL=Y` in `[DEFAULT]`), or `None`.
    pub tls: Option<TlsSettings>,
    /// Ignored keys and lines.
    pub warnings: Vec<SettingsWarning>,
}

impl Settings {
    /// Read and parse a settings file.
    pub fn load(path: &Path) -> Result<Settings, SettingsError> {
        // A regular file of at most 16 MiB (a FIFO hung the start, /dev/zero was read
        // until memory ran out: probe).
        let text =
            tickwire_rt::files::read_to_string_limited(path, 16 << 20).map_err(|source| {
                SettingsError::Io {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
        Settings::parse(&text, &path.display().to_string())
    }

    /// Parse settings text; `file` names it in messages.
    pub fn parse(text: &str, file: &str) -> Result<Settings, SettingsError> {
        let mut warnings = Vec::new();
        let warn = |warnings: &mut Vec<SettingsWarning>, line, message: String| {
            warnings.push(SettingsWarning {
                file: file.to_string(),
                line,
                message,
            })
        };
        let mut default = Section::default();
        let mut sessions: Vec<Section> = Vec::new();
        // Which section receives key/values: None before the first, or an ignored section.
        enum Target {
            Nothing,
            Default,
            Session,
            Other,
        }
        let mut target = Target::Nothing;
        // `Key=Y` of a setting not honoured, in [DEFAULT]: reported only if a session
        // inherits it (one that sets `Key=N` itself is not concerned).
        let mut default_not_honoured: Vec<(&'static str, usize, String)> = Vec::new();
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.len() >= 2 && line.starts_with('[') && line.ends_with(']') {
                let name = line[1..line.len() - 1].trim();
                target = match name {
                    "DEFAULT" => {
                        default.line = line_no;
                        Target::Default
                    }
                    "SESSION" => {
                        sessions.push(Section {
                            line: line_no,
                            values: BTreeMap::new(),
                        });
                        Target::Session
                    }
                    _ => {
                        warn(
                            &mut warnings,
                            line_no,
                            format!(
                                "section [{name}] ignored (only [DEFAULT] and [SESSION] are used)"
                            ),
                        );
                        Target::Other
                    }
                };
                continue;
            }
            let malformed = |reason| SettingsError::Malformed {
                file: file.to_string(),
                line: line_no,
                text: line.to_string(),
                reason,
            };
            if line.starts_with('[') {
                return Err(malformed("a section header without its closing ']'"));
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(malformed(
                    "expected Key=Value, a [SECTION] header or a # comment",
                ));
            };
            let (key, value) = (key.trim(), value.trim());
            if matches!(target, Target::Other) {
                continue; // the whole section was reported as ignored
            }
            let Some((canon, support, n)) = lookup(key) else {
                return Err(SettingsError::UnknownKey {
                    file: file.to_string(),
                    line: line_no,
                    key: key.to_string(),
                    suggestion: suggest(key),
                });
            };
            if support == Tls && matches!(target, Target::Session) {
                return Err(SettingsError::Tls {
                    file: file.to_string(),
                    line: line_no,
                    key: canon,
                    value: value.to_string(),
                    reason: "QuickFIX reads the SSL settings from [DEFAULT] only (one TLS \
                             configuration per engine); move it to [DEFAULT]"
                        .to_string(),
                });
            }
            match support {
                Ignored => warn(
                    &mut warnings,
                    line_no,
                    format!("{canon} is a QuickFIX setting tickwire does not implement: ignored"),
                ),
                NotHonoured(why) => match value {
                    "N" => {}
                    "Y" if matches!(target, Target::Default) => default_not_honoured.push((
                        canon,
                        line_no,
                        format!(
                            "{canon}=Y is a QuickFIX setting tickwire does not honour ({why}): \
                             ignored"
                        ),
                    )),
                    "Y" => warn(
                        &mut warnings,
                        line_no,
                        format!(
                            "{canon}=Y is a QuickFIX setting tickwire does not honour ({why}): \
                             ignored"
                        ),
                    ),
                    _ => {
                        return Err(SettingsError::BadValue {
                            file: file.to_string(),
                            line: line_no,
                            key: canon,
                            value: value.to_string(),
                            expected: "Y or N".to_string(),
                        })
                    }
                },
                Implemented | Tls => {}
            }
            let section = match target {
                Target::Default => &mut default,
                Target::Session => match sessions.last_mut() {
                    Some(s) => s,
                    None => continue,
                },
                Target::Nothing => {
                    warn(
                        &mut warnings,
                        line_no,
                        format!("{canon} before any section: ignored"),
                    );
                    continue;
                }
                Target::Other => continue, // unreachable: skipped above
            };
            let sub = if canon == "AppDataDictionary" {
                key.get("AppDataDictionary.".len()..)
                    .unwrap_or("")
                    .to_string()
            } else if n > 0 {
                format!("{n:010}")
            } else {
                String::new()
            };
            let before = section.values.insert(
                (canon, sub),
                Entry {
                    value: value.to_string(),
                    line: line_no,
                },
            );
            // The last value counts, as in QuickFIX; said, since a repeat is mostly a
            // slip (hostile-input pass: silently accepted).
            if let Some(first) = before {
                warn(
                    &mut warnings,
                    line_no,
                    format!(
                        "{canon} repeated in this section (line {} first): the last value, {value:?}, counts",
                        first.line
                    ),
                );
            }
        }
        for (canon, line, message) in default_not_honoured {
            let inherited = sessions
                .iter()
                .any(|s| !s.values.contains_key(&(canon, String::new())));
            // The last [DEFAULT] value counts: a later `Key=N` there withdrew it.
            let still_y = default
                .values
                .get(&(canon, String::new()))
                .is_some_and(|e| e.line == line);
            if inherited && still_y {
                warn(&mut warnings, line, message);
            }
        }
        warnings.sort_by_key(|w| w.line);
        let tls = tls::parse(file, &default.values)?;
        let mut out = Vec::with_capacity(sessions.len());
        for s in sessions {
            let mut merged = default.values.clone();
            merged.extend(s.values);
            let settings = build(file, s.line, &merged)?;
            if out.iter().any(|o: &SessionSettings| o.id == settings.id) {
                return Err(SettingsError::DuplicateSession {
                    file: file.to_string(),
                    line: s.line,
                    session: settings.id.to_string(),
                });
            }
            out.push(settings);
        }
        Ok(Settings {
            sessions: out,
            tls,
            warnings,
        })
    }

    /// The session with this identity.
    pub fn session(&self, id: &SessionId) -> Option<&SessionSettings> {
        self.sessions.iter().find(|s| &s.id == id)
    }
}

type Values = BTreeMap<(&'static str, String), Entry>;

struct Reader<'a> {
    file: &'a str,
    line: usize,
    values: &'a Values,
    session: String,
}

impl Reader<'_> {
    fn entry(&self, key: &'static str) -> Option<&Entry> {
        self.values.get(&(key, String::new()))
    }
    fn string(&self, key: &'static str) -> Option<String> {
        self.entry(key).map(|e| e.value.clone())
    }
    fn bad(&self, key: &'static str, e: &Entry, expected: impl Into<String>) -> SettingsError {
        SettingsError::BadValue {
            file: self.file.to_string(),
            line: e.line,
            key,
            value: e.value.clone(),
            expected: expected.into(),
        }
    }
    fn missing(&self, key: &'static str) -> SettingsError {
        SettingsError::Missing {
            file: self.file.to_string(),
            line: self.line,
            session: self.session.clone(),
            key,
        }
    }
    fn required(&self, key: &'static str) -> Result<String, SettingsError> {
        match self.entry(key) {
            Some(e) if !e.value.is_empty() => Ok(e.value.clone()),
            _ => Err(self.missing(key)),
        }
    }
    fn bool(&self, key: &'static str, default: bool) -> Result<bool, SettingsError> {
        match self.entry(key) {
            None => Ok(default),
            Some(e) => match e.value.as_str() {
                "Y" => Ok(true),
                "N" => Ok(false),
                _ => Err(self.bad(key, e, "Y or N")),
            },
        }
    }
    /// `e`, the value of `key`, as a plain decimal integer within `range`; anything
    /// else (a sign, a space, a number out of range) is an error naming the key, the
    /// value and the range (`expected an integer in 1..=65535`). `range` must fit `T`.
    fn parse_num<T: TryFrom<u64>>(
        &self,
        key: &'static str,
        e: &Entry,
        range: RangeInclusive<u64>,
    ) -> Result<T, SettingsError> {
        let digits = !e.value.is_empty() && e.value.bytes().all(|b| b.is_ascii_digit());
        digits
            .then(|| e.value.parse::<u64>().ok())
            .flatten()
            .filter(|n| range.contains(n))
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(|| {
                let expected = format!("an integer in {}..={}", range.start(), range.end());
                self.bad(key, e, expected)
            })
    }
    /// [`Reader::parse_num`] of `key`, None when absent.
    fn num<T: TryFrom<u64>>(
        &self,
        key: &'static str,
        range: RangeInclusive<u64>,
    ) -> Result<Option<T>, SettingsError> {
        self.entry(key)
            .map(|e| self.parse_num(key, e, range))
            .transpose()
    }
    fn time(&self, key: &'static str) -> Result<Option<NaiveTime>, SettingsError> {
        self.entry(key)
            .map(|e| {
                NaiveTime::parse_from_str(&e.value, "%H:%M:%S")
                    .map_err(|_| self.bad(key, e, "a time HH:MM:SS"))
            })
            .transpose()
    }
    fn day(&self, key: &'static str) -> Result<Option<Weekday>, SettingsError> {
        self.entry(key)
            .map(|e| {
                let abbr = e.value.get(..2).map(|a| a.to_ascii_lowercase());
                match abbr.as_deref() {
                    Some("su") => Ok(Weekday::Sun),
                    Some("mo") => Ok(Weekday::Mon),
                    Some("tu") => Ok(Weekday::Tue),
                    Some("we") => Ok(Weekday::Wed),
                    Some("th") => Ok(Weekday::Thu),
                    Some("fr") => Ok(Weekday::Fri),
                    Some("sa") => Ok(Weekday::Sat),
                    _ => Err(self.bad(key, e, "a day (Su, Mo, Tu, We, Th, Fr, Sa)")),
                }
            })
            .transpose()
    }
    fn path(&self, key: &'static str) -> Option<PathBuf> {
        self.entry(key).map(|e| PathBuf::from(&e.value))
    }
}

/// The accepted ranges of numeric settings (what [`Reader::num`] names in its error).
const ANY_U32: RangeInclusive<u64> = 0..=0xFFFF_FFFF;
/// A count or period that 0 would make meaningless or a busy loop.
const POSITIVE_U32: RangeInclusive<u64> = 1..=0xFFFF_FFFF;
/// SocketAcceptPort: 0 listens on any free port.
const ACCEPT_PORT: RangeInclusive<u64> = 0..=65535;
/// SocketConnectPort (and its failovers): port 0 cannot be connected to.
const CONNECT_PORT: RangeInclusive<u64> = 1..=65535;
/// The largest `usize` (a lossless conversion: `usize` is at most 64 bits).
const ANY_USIZE_MAX: u64 = usize::MAX as u64;

fn build(file: &str, line: usize, values: &Values) -> Result<SessionSettings, SettingsError> {
    let mut r = Reader {
        file,
        line,
        values,
        session: "(unidentified)".to_string(),
    };
    let opt = |k| r.string(k).unwrap_or_default();
    let id = SessionId {
        begin_string: opt("BeginString"),
        sender_comp_id: opt("SenderCompID"),
        sender_sub_id: opt("SenderSubID"),
        sender_location_id: opt("SenderLocationID"),
        target_comp_id: opt("TargetCompID"),
        target_sub_id: opt("TargetSubID"),
        target_location_id: opt("TargetLocationID"),
        qualifier: opt("SessionQualifier"),
    };
    r.session = id.to_string();
    r.required("BeginString")?;
    r.required("SenderCompID")?;
    r.required("TargetCompID")?;
    let ct = r.required("ConnectionType")?;
    let connection_type = match ct.as_str() {
        "acceptor" => ConnectionType::Acceptor,
        "initiator" => ConnectionType::Initiator,
        _ => {
            // Invariant: `r.required("ConnectionType")` just returned it.
            #[allow(clippy::expect_used)]
            let e = r.entry("ConnectionType").expect("checked above");
            return Err(r.bad("ConnectionType", e, "acceptor or initiator"));
        }
    };
    let fixt = id.begin_string == "FIXT.1.1";
    let default_appl_ver_id = r.string("DefaultApplVerID");
    if fixt && default_appl_ver_id.is_none() {
        return Err(r.missing("DefaultApplVerID (required for FIXT.1.1)"));
    }
    let non_stop_session = r.bool("NonStopSession", false)?;
    let start_time = r.time("StartTime")?;
    let end_time = r.time("EndTime")?;
    if !non_stop_session {
        if start_time.is_none() {
            return Err(r.missing("StartTime (or NonStopSession=Y)"));
        }
        if end_time.is_none() {
            return Err(r.missing("EndTime (or NonStopSession=Y)"));
        }
    }
    let start_day = r.day("StartDay")?;
    let end_day = r.day("EndDay")?;
    if start_day.is_some() != end_day.is_some() {
        return Err(r.missing(if start_day.is_some() {
            "EndDay (StartDay is set)"
        } else {
            "StartDay (EndDay is set)"
        }));
    }
    let time_zone = r
        .entry("TimeZone")
        .map(|e| {
            e.value
                .parse::<chrono_tz::Tz>()
                .map_err(|_| r.bad("TimeZone", e, "an IANA time zone name"))
        })
        .transpose()?;
    let heartbt_int = r.num::<u32>("HeartBtInt", ANY_U32)?;
    let socket_accept_port = r.num::<u16>("SocketAcceptPort", ACCEPT_PORT)?;
    // Primary connect host/port then numbered failovers.
    let mut socket_connect = Vec::new();
    let mut hosts: Vec<(&str, &Entry)> = values
        .iter()
        .filter(|((k, _), _)| *k == "SocketConnectHost")
        .map(|((_, n), e)| (n.as_str(), e))
        .collect();
    hosts.sort_by(|a, b| a.0.cmp(b.0));
    for (n, host) in hosts {
        let port_key = ("SocketConnectPort", n.to_string());
        let Some(port) = values.get(&port_key) else {
            return Err(r.missing("SocketConnectPort (for each SocketConnectHost<n>)"));
        };
        let port: u16 = r.parse_num("SocketConnectPort", port, CONNECT_PORT)?;
        socket_connect.push((host.value.clone(), port));
    }
    match connection_type {
        ConnectionType::Acceptor => {
            if socket_accept_port.is_none() {
                return Err(r.missing("SocketAcceptPort (required for acceptors)"));
            }
        }
        ConnectionType::Initiator => {
            if heartbt_int.is_none() {
                return Err(r.missing("HeartBtInt (required for initiators)"));
            }
            if r.entry("SocketConnectHost").is_none() {
                return Err(r.missing("SocketConnectHost (required for initiators)"));
            }
            if r.entry("SocketConnectPort").is_none() {
                return Err(r.missing("SocketConnectPort (required for initiators)"));
            }
        }
    }
    let old_fix = matches!(id.begin_string.as_str(), "FIX.4.0" | "FIX.4.1");
    let timestamp_precision = match r.num::<u8>("TimestampPrecision", 0..=9)? {
        Some(0) => TimestampPrecision::Seconds,
        Some(1..=3) => TimestampPrecision::Millis,
        Some(4..=6) => TimestampPrecision::Micros,
        Some(_) => TimestampPrecision::Nanos,
        None if old_fix || !r.bool("MillisecondsInTimeStamp", true)? => TimestampPrecision::Seconds,
        None => TimestampPrecision::Millis,
    };
    let idle_strategy = match r.entry("TickwireIdleStrategy") {
        None => IdleStrategy::Block,
        Some(e) => match e.value.to_ascii_lowercase().as_str() {
            "block" => IdleStrategy::Block,
            "spin" => IdleStrategy::Spin,
            _ => return Err(r.bad("TickwireIdleStrategy", e, "block or spin")),
        },
    };
    let batch = r
        .num::<u32>("TickwireStoreSyncBatch", 1..=u64::from(u32::MAX))?
        .unwrap_or(64);
    let store_sync = match r.entry("TickwireStoreSync") {
        None => SyncPolicy::Os,
        Some(e) => match e.value.to_ascii_lowercase().as_str() {
            "every" => SyncPolicy::EveryMessage,
            "batched" => SyncPolicy::Batched { messages: batch },
            "os" => SyncPolicy::Os,
            _ => return Err(r.bad("TickwireStoreSync", e, "every, batched or os")),
        },
    };
    let allowed_remote_addresses = match r.entry("AllowedRemoteAddresses") {
        None => Vec::new(),
        Some(e) => e
            .value
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| a.parse::<IpAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| r.bad("AllowedRemoteAddresses", e, "comma-separated IP addresses"))?,
    };
    let max_logon_length = r.num::<usize>("TickwireMaxLogonLength", 64..=ANY_USIZE_MAX)?;
    let max_pending_connections =
        r.num::<usize>("TickwireMaxPendingConnections", 1..=ANY_USIZE_MAX)?;
    let app_data_dictionaries: Vec<(String, PathBuf)> = values
        .iter()
        .filter(|((k, _), _)| *k == "AppDataDictionary")
        .map(|((_, sfx), e)| (sfx.clone(), PathBuf::from(&e.value)))
        .collect();
    // UseDataDictionary=Y written out without the dictionary it needs: QuickFIX refuses
    // the session ("DataDictionary not defined"); running unvalidated would hide the
    // mistake. (Left at its default, the session runs without validation: docs/fix.md.)
    if r.entry("UseDataDictionary").is_some() && r.bool("UseDataDictionary", true)? {
        if id.begin_string == "FIXT.1.1" {
            if r.entry("TransportDataDictionary").is_none() {
                return Err(
                    r.missing("TransportDataDictionary (UseDataDictionary=Y asks for validation)")
                );
            }
            if app_data_dictionaries.is_empty() {
                return Err(
                    r.missing("AppDataDictionary (UseDataDictionary=Y asks for validation)")
                );
            }
        } else if r.entry("DataDictionary").is_none() {
            return Err(r.missing("DataDictionary (UseDataDictionary=Y asks for validation)"));
        }
    }
    Ok(SessionSettings {
        line,
        connection_type,
        heartbt_int,
        start_time,
        end_time,
        start_day,
        end_day,
        time_zone,
        use_local_time: r.bool("UseLocalTime", false)?,
        non_stop_session,
        // 0 reconnected in a busy loop (99% CPU, ~48,000 log lines a second with nothing
        // listening: hostile-input pass); QuickFIX takes a positive number.
        reconnect_interval: r.num("ReconnectInterval", POSITIVE_U32)?.unwrap_or(30),
        socket_accept_port,
        socket_accept_host: r.string("SocketAcceptHost"),
        socket_connect,
        socket_nodelay: r.bool("SocketNodelay", true)?,
        reset_on_logon: r.bool("ResetOnLogon", false)?,
        reset_on_logout: r.bool("ResetOnLogout", false)?,
        reset_on_disconnect: r.bool("ResetOnDisconnect", false)?,
        send_reset_seq_num_flag: r.bool("SendResetSeqNumFlag", false)?,
        persist_messages: r.bool("PersistMessages", true)?,
        file_store_path: r.path("FileStorePath"),
        file_log_path: r.path("FileLogPath"),
        data_dictionary: r.path("DataDictionary"),
        transport_data_dictionary: r.path("TransportDataDictionary"),
        app_data_dictionaries,
        default_appl_ver_id,
        use_data_dictionary: r.bool("UseDataDictionary", true)?,
        validate_length_and_checksum: r.bool("ValidateLengthAndChecksum", true)?,
        validate_fields_out_of_order: r.bool("ValidateFieldsOutOfOrder", true)?,
        validate_fields_have_values: r.bool("ValidateFieldsHaveValues", true)?,
        validate_user_defined_fields: r.bool("ValidateUserDefinedFields", true)?,
        allow_unknown_msg_fields: r.bool("AllowUnknownMsgFields", false)?,
        check_comp_id: r.bool("CheckCompID", true)?,
        check_latency: r.bool("CheckLatency", true)?,
        max_latency: r.num("MaxLatency", ANY_U32)?.unwrap_or(120),
        logon_timeout: r.num("LogonTimeout", ANY_U32)?.unwrap_or(10),
        logout_timeout: r.num("LogoutTimeout", ANY_U32)?.unwrap_or(2),
        resend_request_chunk_size: r.num("ResendRequestChunkSize", ANY_U32)?.unwrap_or(0),
        send_redundant_resend_requests: r.bool("SendRedundantResendRequests", false)?,
        send_next_expected_msg_seq_num: r.bool("SendNextExpectedMsgSeqNum", false)?,
        timestamp_precision,
        idle_strategy,
        store_sync,
        allowed_remote_addresses,
        max_logon_length,
        max_pending_connections,
        id,
    })
}
