//! The FIX session layer: a pure state machine (no sockets, threads or clock).
//!
//! # Driving a session
//!
//! A [`Session`] is fed events and time by a driver and polled for what to do, in the
//! vocabulary every tickwire core uses (quinn's): `handle_*` for input, `poll_*` for
//! output ([`Session::poll_event`], [`Session::poll_timeout`]). Time
//! (`now`, a [`tickwire_rt::UtcNanos`]: wall-clock UTC, ns since the Unix epoch) stamps
//! SendingTime (52) and drives every timer, so tests use a fake clock.
//!
//! ```text
//! driver                                 session
//! ──────                                 ───────
//! (initiator) poll_event() == Connect ─► open TCP
//! connected                         ──►  handle_connected(now)      initiator: Logon queued
//! frame a complete message          ──►  handle_message(now, bytes) checks, answers, events
//! timer fires (poll_timeout)        ──►  handle_timeout(now)        heartbeats, timeouts,
//!                                                                   schedule, reconnect
//! application sends                 ──►  send_app(now, type, body)  stored, sent if logged on
//! connection lost / closed          ──►  handle_disconnected(now)
//! after EVERY call above: while let Some(o) = poll_event() { Send(bytes) → write;
//!     Disconnect → close; Connect → connect; Event(e) → application }
//! then sleep until poll_timeout() (or input), and call store_mut().flush() per the
//! store's sync policy.
//! ```
//!
//! The driver frames messages with [`codec::frame_len`] and passes every complete
//! frame, even one with a bad CheckSum: the session decides (garbled messages are
//! ignored, or end a connection that is not logged on, as QuickFIX does). The driver
//! of an acceptor may look at the first message to pick the session (by BeginString,
//! SenderCompID, TargetCompID) and should refuse a connection whose first message is
//! not a Logon (QuickFIX's acceptor does; the session would disconnect anyway).
//!
//! # Behaviour
//!
//! The rules follow QuickFIX/C++ 1.16 `Session.cpp` (check order, texts of Logout and
//! Reject 58 values, which fields are set, field order): see `docs/fix.md` for the
//! full description, the settings honoured and the compatibility notes. Messages are
//! written as QuickFIX writes them: 8, 9, 35, then the other header fields in tag
//! order (34, 43, 49, 50, 52, 56, 57, 122, ...), then the body in tag order.
//!
//! # Code map
//!
//! * `session.rs`: the public API ([`Session`], [`SessionConfig`], [`Output`],
//!   [`Event`], [`Validation`], [`SendError`]), timers, disconnect bookkeeping.
//! * `session/incoming.rs`: parsing, QuickFIX's `verify` checks, one handler per
//!   administrative message type, the out-of-sequence queue.
//! * `session/resend.rs`: answering ResendRequests from the store.
//! * `session/outgoing.rs`: header writing, storing/numbering (`sendRaw`), builders.
//! * `session/outbox.rs`: the output FIFO; `session/config.rs`: settings;
//!   `session/schedule.rs`: session periods.
//!
//! # Allocation
//!
//! Steady state (heartbeats, application messages in sequence) allocates nothing:
//! the encoder, the parsed field table and the output buffer are reused. Out-of-order
//! messages are copied into recycled buffers while they wait for a gap to be filled.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

mod config;
mod incoming;
mod outbox;
mod outgoing;
mod resend;
mod schedule;

pub use config::{ConfigError, Role, SessionConfig};
pub use outbox::{Event, Output};
pub use schedule::{Schedule, Zone};

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;

use tickwire_rt::UtcNanos;

use crate::codec::{self, Encoder, Fields, MessageRef, TimestampPrecision, TimestampReader};
use crate::dict::Dictionary;
use crate::store::{MessageStore, StoreError};
use crate::validate::{self, Dictionaries, SessionRejectReason, ValidationOptions};
use config::Version;
use outbox::Outbox;

const NANOS: u64 = 1_000_000_000;
/// Most out-of-sequence messages kept while waiting for a resend (a hostile peer
/// could otherwise make the queue grow without bound). Messages beyond are dropped;
/// the counterparty resends them when asked.
const MAX_QUEUED: usize = 100_000;
/// At most this many bytes of messages queued ahead of a gap: a counterparty that
/// sends large messages above a gap cannot make the session hold them without limit
/// (a message not queued is resent, as the resend request covers it).
const MAX_QUEUED_BYTES: usize = 64 << 20;
/// Field tables kept for reuse (the parse pool, the outbox's) give back their room
/// beyond this many fields (768 KiB) after a message that needed more: a counterparty's
/// one message of a million fields had left ~38 MB per session held for good
/// (hostile-input pass).
pub const KEEP_FIELDS: usize = 1 << 16;
/// Byte buffers kept for reuse (the outbox's, the resend step's) give back their room
/// beyond [`KEEP_BYTES`] once they hold more than twice that.
pub const KEEP_BYTES: usize = 1 << 20;
/// How long the expected number must stand still at a number the full queue refused
/// before it is asked for again (`ask_for_dropped`): a counterparty already resending
/// the range (an open-ended ResendRequest covers it) moves it on meanwhile and is not
/// asked twice.
const DROPPED_ASK_WAIT: u64 = NANOS;
/// Queued messages processed in one call at most; the rest go on by the same step
/// at each [`Session::handle_send_room`] ([`Session::queue_pending`]), so a
/// counterparty that fills the queue and then sends the missing message cannot hold
/// the engine, and every other session, for the whole queue (100,000 messages took
/// 8 s of one turn, measured by a hostile-input probe).
const QUEUE_CHUNK: usize = 1024;
/// Buffers of queued messages are reused, but only those of at most this capacity,
/// and at most `MAX_SPARE_BUFS` of them: the memory of a burst of large messages is
/// given back once they are processed.
const SPARE_BUF_KEEP: usize = 16 << 10;
const MAX_SPARE_BUFS: usize = 256;

/// Message types (35) the session handles itself.
mod mt {
    pub const HEARTBEAT: &[u8] = b"0";
    pub const TEST_REQUEST: &[u8] = b"1";
    pub const RESEND_REQUEST: &[u8] = b"2";
    pub const REJECT: &[u8] = b"3";
    pub const SEQUENCE_RESET: &[u8] = b"4";
    pub const LOGOUT: &[u8] = b"5";
    pub const LOGON: &[u8] = b"A";
    pub const BUSINESS_REJECT: &[u8] = b"j";
}

/// Tags the session reads or writes.
mod tag {
    pub const BEGIN_SEQ_NO: u32 = 7;
    pub const BEGIN_STRING: u32 = 8;
    pub const BODY_LENGTH: u32 = 9;
    pub const CHECK_SUM: u32 = 10;
    pub const END_SEQ_NO: u32 = 16;
    pub const MSG_SEQ_NUM: u32 = 34;
    pub const MSG_TYPE: u32 = 35;
    pub const NEW_SEQ_NO: u32 = 36;
    pub const POSS_DUP_FLAG: u32 = 43;
    pub const REF_SEQ_NUM: u32 = 45;
    pub const SENDER_COMP_ID: u32 = 49;
    pub const SENDER_SUB_ID: u32 = 50;
    pub const SENDING_TIME: u32 = 52;
    pub const TARGET_COMP_ID: u32 = 56;
    pub const TARGET_SUB_ID: u32 = 57;
    pub const TEXT: u32 = 58;
    pub const ENCRYPT_METHOD: u32 = 98;
    pub const HEART_BT_INT: u32 = 108;
    pub const TEST_REQ_ID: u32 = 112;
    pub const ORIG_SENDING_TIME: u32 = 122;
    pub const GAP_FILL_FLAG: u32 = 123;
    pub const RESET_SEQ_NUM_FLAG: u32 = 141;
    pub const SENDER_LOCATION_ID: u32 = 142;
    pub const TARGET_LOCATION_ID: u32 = 143;
    pub const REF_TAG_ID: u32 = 371;
    pub const REF_MSG_TYPE: u32 = 372;
    pub const SESSION_REJECT_REASON: u32 = 373;
    pub const BUSINESS_REJECT_REASON: u32 = 380;
    pub const NEXT_EXPECTED_MSG_SEQ_NUM: u32 = 789;
    pub const DEFAULT_APPL_VER_ID: u32 = 1137;
    pub const APPL_VER_ID: u32 = 1128;
}

/// SessionRejectReason (373) values (the one list is [`crate::codec::reject_reason`])
/// and QuickFIX's texts for them.
pub mod session_reject {
    pub use crate::codec::reject_reason::*;

    /// QuickFIX's Text (58) for a SessionRejectReason; None for reasons QuickFIX has
    /// no text for (7, 8, 12, 15, 17+), which it sends without a 58.
    pub fn text(reason: u32) -> Option<&'static str> {
        Some(match reason {
            0 => "Invalid tag number",
            1 => "Required tag missing",
            2 => "Tag not defined for this message type",
            4 => "Tag specified without a value",
            5 => "Value is incorrect (out of range) for this tag",
            6 => "Incorrect data format for value",
            9 => "CompID problem",
            10 => "SendingTime accuracy problem",
            11 => "Invalid MsgType",
            13 => "Tag appears more than once",
            14 => "Tag specified out of required order",
            16 => "Incorrect NumInGroup count for repeating group",
            _ => return None,
        })
    }
}

/// BusinessRejectReason (380) values and QuickFIX's texts for them.
pub mod business_reject {
    /// 0 Other.
    pub const OTHER: u32 = 0;
    /// 1 Unknown ID.
    pub const UNKNOWN_ID: u32 = 1;
    /// 2 Unknown Security.
    pub const UNKNOWN_SECURITY: u32 = 2;
    /// 3 Unsupported Message Type.
    pub const UNSUPPORTED_MESSAGE_TYPE: u32 = 3;
    /// 4 Application Not Available.
    pub const APPLICATION_NOT_AVAILABLE: u32 = 4;
    /// 5 Conditionally Required Field Missing.
    pub const CONDITIONALLY_REQUIRED_FIELD_MISSING: u32 = 5;
    /// 6 Not Authorized.
    pub const NOT_AUTHORIZED: u32 = 6;
    /// 7 DeliverTo Firm Not Available At This Time.
    pub const DELIVER_TO_FIRM_NOT_AVAILABLE: u32 = 7;

    /// QuickFIX's Text (58) for a BusinessRejectReason.
    pub fn text(reason: u32) -> Option<&'static str> {
        Some(match reason {
            0 => "Other",
            1 => "Unknown ID",
            2 => "Unknown Security",
            3 => "Unsupported Message Type",
            4 => "Application Not Available",
            5 => "Conditionally Required Field Missing",
            6 => "Not Authorized",
            7 => "DeliverTo Firm Not Available At This Time",
            _ => return None,
        })
    }
}

/// Dictionary validation for a session (QuickFIX `UseDataDictionary=Y` with
/// `DataDictionary`, or `TransportDataDictionary` + `AppDataDictionary` for FIXT).
///
/// Every received message is checked with [`validate::validate`] before the session
/// rules run (as [`validate::validate_cached`]: the same answer, with only the value
/// checks for a message of the last accepted shape), and a failure is answered exactly as QuickFIX answers its validation
/// exceptions (Reject 35=3 with SessionRejectReason/RefTagID, consuming the message's
/// sequence number when it is the expected one). The CompID and SendingTime switches
/// of `options` are not used: [`SessionConfig`]'s `check_comp_id`, `check_latency`
/// and `max_latency` govern those checks.
#[derive(Clone, Debug)]
pub struct Validation {
    /// FIX.4.x: the dictionary; FIXT.1.1: the transport dictionary (FIXT11.xml).
    pub transport: Arc<Dictionary>,
    /// The application dictionary (the same as `transport` for FIX.4.x). FIXT: the
    /// one an application message whose ApplVerID has none in `by_appl_ver_id` is
    /// validated with (the unsuffixed `AppDataDictionary`).
    pub app: Arc<Dictionary>,
    /// FIXT: the application dictionaries by ApplVerID code (`"7"` FIX.5.0, `"8"`
    /// SP1, `"9"` SP2, ...), as QuickFIX's `DataDictionaryProvider` holds them: the
    /// unsuffixed `AppDataDictionary` under the session's DefaultApplVerID, each
    /// `AppDataDictionary.<version>` under its version. An application message is
    /// validated with the one of its ApplVerID (1128) or, without one, of the
    /// counterparty's DefaultApplVerID (1137 of its Logon; FIX.5.0 before any).
    /// Empty for FIX.4.x.
    pub by_appl_ver_id: Vec<(Box<str>, Arc<Dictionary>)>,
    /// QuickFIX's validation switches.
    pub options: ValidationOptions,
}

impl Validation {
    /// One dictionary for a FIX.4.x session.
    pub fn single(dict: Arc<Dictionary>, options: ValidationOptions) -> Validation {
        Validation {
            transport: dict.clone(),
            app: dict,
            by_appl_ver_id: Vec::new(),
            options,
        }
    }

    /// Transport and application dictionaries for a FIXT.1.1 session.
    pub fn fixt(
        transport: Arc<Dictionary>,
        app: Arc<Dictionary>,
        options: ValidationOptions,
    ) -> Validation {
        Validation {
            transport,
            app,
            by_appl_ver_id: Vec::new(),
            options,
        }
    }

    /// FIXT: the application dictionary for ApplVerID code `appl_ver_id` (`"9"` or
    /// the BeginString form `"FIX.5.0SP2"`), replacing one given before for it.
    pub fn with_app_for(mut self, appl_ver_id: &str, dict: Arc<Dictionary>) -> Validation {
        let code = config::appl_ver_id(appl_ver_id);
        self.by_appl_ver_id.retain(|(c, _)| &**c != code);
        self.by_appl_ver_id.push((code.into(), dict));
        self
    }

    /// The application dictionary of ApplVerID code `appl_ver_id`, else the default
    /// one ([`Validation::app`]).
    pub fn app_for(&self, appl_ver_id: &[u8]) -> &Arc<Dictionary> {
        self.by_appl_ver_id
            .iter()
            .find(|(c, _)| c.as_bytes() == appl_ver_id)
            .map_or(&self.app, |(_, d)| d)
    }
}

/// Why [`Session::send_app`] (or a `reject_*` call) did not store the message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// Administrative message types (0, 1, 2, 3, 4, 5, A) are generated by the
    /// session only.
    #[error("message type {0:?} is administrative: the session generates it itself")]
    AdminMsgType(String),
    /// Not logged on and the next Logon will reset sequence numbers (ResetOnLogon,
    /// ResetOnLogout or ResetOnDisconnect at 1/1), so the message would be lost:
    /// QuickFIX refuses it too.
    #[error("not logged on and the next logon resets sequence numbers: message not stored")]
    WouldBeReset,
    /// A reject needs a logged-on session.
    #[error("not logged on")]
    NotLoggedOn,
    /// The message store failed; the message was not sent.
    #[error("message store failed")]
    Store(#[source] StoreError),
}

/// The outgoing-resend state: a ResendRequest is outstanding for `begin..=end`
/// (one chunk), and the whole gap to fill ends at `gap_end`.
#[derive(Clone, Copy, Debug)]
struct ResendRange {
    begin: u64,
    end: u64,
    gap_end: u64,
}

/// What a reject refers to: the rejected message's MsgSeqNum and MsgType.
#[derive(Clone, Copy)]
struct RefMsg<'a> {
    seq: Option<u64>,
    msg_type: &'a [u8],
    /// Its routing fields, for the reverse routing of a Reject.
    route: Route<'a>,
}

impl<'a> RefMsg<'a> {
    fn of(m: &MessageRef<'a>) -> Self {
        RefMsg {
            seq: m.seq_num(),
            msg_type: m.msg_type(),
            route: Route::of(|t| m.get(t)),
        }
    }
}

/// The routing fields of a received message: OnBehalfOfCompID/SubID/LocationID (115,
/// 116, 144) and DeliverToCompID/SubID/LocationID (128, 129, 145); empty = absent.
#[derive(Clone, Copy, Default)]
struct Route<'a> {
    on_behalf_of: [&'a [u8]; 3],
    deliver_to: [&'a [u8]; 3],
}

impl<'a> Route<'a> {
    fn of(get: impl Fn(u32) -> Option<&'a [u8]>) -> Self {
        let v = |t| get(t).unwrap_or_default();
        Route {
            on_behalf_of: [v(115), v(116), v(144)],
            deliver_to: [v(128), v(129), v(145)],
        }
    }

    /// The reversed routing fields, in tag order, as QuickFIX's `Message::reverseRoute`
    /// writes them on a Reject: OnBehalfOf* becomes DeliverTo* and the other way round;
    /// an empty value is not carried over; LocationIDs from FIX.4.1 on (QuickFIX
    /// 1.15.1: `beginString >= FIX.4.1`; its acceptance test `fix41/ReverseRoute`).
    fn reversed(&self, ge41: bool) -> [(u32, &'a [u8]); 6] {
        let [obo, obo_sub, obo_loc] = self.on_behalf_of;
        let [dt, dt_sub, dt_loc] = self.deliver_to;
        let (obo_loc, dt_loc): (&[u8], &[u8]) = if ge41 { (obo_loc, dt_loc) } else { (b"", b"") };
        [
            (115, dt),
            (116, dt_sub),
            (128, obo),
            (129, obo_sub),
            (144, dt_loc),
            (145, obo_loc),
        ]
    }
}

/// Where a header field of a resent message comes from.
#[derive(Clone, Copy)]
enum HeaderValue {
    Stored(usize, usize),
    Yes,
    Now,
}

type StoreResult = Result<(), StoreError>;

/// The session's connection, as its driver reported it. One value instead of a
/// `connected` and a `connecting` flag, which could both be set; the state of a
/// Logon/Logout exchange exists only inside [`Link::Up`], so nothing of one connection
/// survives into the next.
#[derive(Debug)]
enum Link {
    /// No connection, none being made.
    Down,
    /// Initiator: an [`Output::Connect`] was emitted and the driver has not reported
    /// back ([`Session::handle_connected`] / [`Session::handle_disconnected`]).
    Connecting,
    /// Connected.
    Up(Connection),
}

/// What one connection's exchange got to (the phase inside [`Link::Up`]).
#[derive(Debug, Default)]
struct Connection {
    /// How far the Logon exchange got.
    logon: Handshake,
    /// Which side's Logon carried ResetSeqNumFlag=Y, until the exchange completes.
    reset: ResetFlag,
    /// Whether we sent a Logout (and now wait for the answer).
    logout: Logout,
    /// Whether queued messages are being processed (a nested drain returns at once).
    queue: Drain,
    /// The resend in progress and the ResendRequests waiting behind it.
    resends: resend::Resends,
}

/// Whether we sent a Logout on this connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
enum Logout {
    #[default]
    NotSent,
    /// Sent: waiting up to LogoutTimeout for the answer.
    Sent,
}

/// Whether the queue of early messages is being processed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
enum Drain {
    #[default]
    Idle,
    Running,
}

/// Which sides of the current connection's Logon exchange did something: ours
/// (`sent`) and the counterparty's (`received`). Used twice: which Logons were
/// exchanged ([`Handshake`]) and which carried ResetSeqNumFlag=Y ([`ResetFlag`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
struct Sides {
    sent: bool,
    received: bool,
}

impl Sides {
    const NONE: Sides = Sides {
        sent: false,
        received: false,
    };

    fn sent(self) -> bool {
        self.sent
    }

    fn received(self) -> bool {
        self.received
    }

    fn both(self) -> bool {
        self.sent && self.received
    }

    fn with_sent(self, sent: bool) -> Sides {
        Sides { sent, ..self }
    }

    fn with_received(self, received: bool) -> Sides {
        Sides { received, ..self }
    }
}

/// Which Logon of the current exchange carried ResetSeqNumFlag=Y (QuickFIX's
/// `sentReset` and `receivedReset`; either, both or none).
type ResetFlag = Sides;

/// Whether the session may log on: disabled by [`Session::logout`] (with the Logout's
/// text) until [`Session::logon`].
#[derive(Debug)]
enum Admin {
    Enabled,
    Disabled {
        /// Text (58) of the Logout the session sends.
        logout_text: String,
    },
}

/// How far the Logon exchange of the current connection got: ours sent, theirs
/// received. Logged on is both (QuickFIX: `sentLogon && receivedLogon`); gone with
/// the connection.
type Handshake = Sides;

/// One FIX session (one counterparty). See the module docs for how to drive it.
pub struct Session<S: MessageStore> {
    cfg: SessionConfig,
    ver: Version,
    precision: TimestampPrecision,
    store: S,
    enc: Encoder,
    out: Outbox,
    validation: Option<Validation>,
    /// The shape of the last message validation accepted (`validate_cached`).
    validated_shape: Box<validate::ShapeCache>,
    /// FIXT: the counterparty's DefaultApplVerID (1137 of its last Logon; QuickFIX
    /// starts at FIX.5.0, `"7"`), which selects the dictionary of its application
    /// messages without an ApplVerID.
    target_appl_ver_id: Vec<u8>,
    /// FIXT: our DefaultApplVerID (1137 of our Logon, and of a BusinessMessageReject):
    /// the configured one, or the counterparty's with
    /// [`SessionConfig::adopt_counterparty_default_appl_ver_id`].
    sender_appl_ver_id: String,

    /// The connection: none, being made (initiator), or up (with how far its
    /// Logon/Logout exchange got).
    link: Link,
    last_connect_attempt: Option<u64>,
    admin: Admin,
    heart_bt_int: u64,
    last_sent: u64,
    last_received: u64,
    connected_at: u64,
    test_requests: u64,
    resend: Option<ResendRange>,
    last_now: u64,
    /// (second, store creation time, inside a period, same period as creation).
    schedule_cache: Cell<Option<(u64, u64, bool, bool)>>,

    queue: BTreeMap<u64, Vec<u8>>,
    /// The bytes of the messages in `queue` (at most `MAX_QUEUED_BYTES`).
    queued_bytes: usize,
    /// The lowest and highest numbers the full queue refused, until they are asked
    /// for again or passed (see `ask_for_dropped`).
    queue_dropped: Option<(u64, u64)>,
    /// The drain stopped at a number the full queue refused: when to ask for it if the
    /// expected number has not moved by then, and what it was (see `ask_for_dropped`).
    dropped_ask: Option<(u64, u64)>,
    /// A resent message (PossDupFlag, below the expected number) arrived since the
    /// last look of `dropped_ask_due`.
    resend_seen: bool,
    /// Queued messages the current call may still process (`QUEUE_CHUNK` at each
    /// entry: however many times one call drains the queue, it takes at most that).
    queue_budget: usize,
    spare_bufs: Vec<Vec<u8>>,
    fields_pool: Vec<Fields>,
    resend_buf: Vec<u8>,
    resend_idx: Vec<(usize, usize)>,
    header_scratch: Vec<(u32, HeaderValue)>,
    text: String,
    /// SendingTime of received messages, parsed once per message.
    sending_times: TimestampReader,
}

impl<S: MessageStore> Session<S> {
    /// A disconnected session over `store` (whose sequence numbers it continues).
    pub fn new(mut cfg: SessionConfig, store: S) -> Result<Self, ConfigError> {
        cfg.check()?;
        cfg.logon_fields.sort_by_key(|&(t, _)| t);
        let ver = Version::of(&cfg.begin_string);
        let precision = cfg.effective_precision();
        let enc = Encoder::new(&cfg.begin_string);
        let heart_bt_int = match cfg.role {
            Role::Initiator => u64::from(cfg.heart_bt_int),
            Role::Acceptor => 0,
        };
        Ok(Session {
            ver,
            precision,
            store,
            enc,
            out: Outbox::default(),
            validation: None,
            validated_shape: Box::default(),
            target_appl_ver_id: b"7".to_vec(),
            sender_appl_ver_id: cfg.default_appl_ver_id.clone(),
            link: Link::Down,
            last_connect_attempt: None,
            admin: Admin::Enabled,
            heart_bt_int,
            last_sent: 0,
            last_received: 0,
            connected_at: 0,
            test_requests: 0,
            resend: None,
            last_now: 0,
            schedule_cache: Cell::new(None),
            queue: BTreeMap::new(),
            queue_dropped: None,
            dropped_ask: None,
            resend_seen: false,
            queued_bytes: 0,
            queue_budget: QUEUE_CHUNK,
            spare_bufs: Vec::new(),
            fields_pool: Vec::new(),
            resend_buf: Vec::new(),
            resend_idx: Vec::new(),
            header_scratch: Vec::new(),
            text: String::new(),
            sending_times: TimestampReader::default(),
            cfg,
        })
    }

    /// Validates received messages with dictionaries (see [`Validation`]). Without
    /// it the session makes the header checks of QuickFIX's standard session
    /// dictionary only (required 34/52 and their formats, the required fields of
    /// administrative messages).
    pub fn with_validation(mut self, validation: Validation) -> Self {
        self.validation = Some(validation);
        self.validated_shape.clear();
        self
    }

    /// The dictionaries the session validates with, if any (`with_validation`).
    pub fn validation(&self) -> Option<&Validation> {
        self.validation.as_ref()
    }

    /// The application dictionary received message `m` was validated with (None
    /// without validation): for FIXT, the one of its ApplVerID or of the
    /// counterparty's DefaultApplVerID ([`Validation::by_appl_ver_id`]).
    pub fn app_dictionary_for(&self, m: &MessageRef<'_>) -> Option<&Dictionary> {
        let v = self.validation.as_ref()?;
        Some(incoming::app_dict(v, &self.target_appl_ver_id, m))
    }

    /// The configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// The message store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The message store, for the driver's `flush` (and for tools that repair
    /// sequence numbers while disconnected).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Consumes the session, returning its store.
    pub fn into_store(self) -> S {
        self.store
    }

    /// Logons exchanged and the session not ended.
    pub fn is_logged_on(&self) -> bool {
        self.handshake().both()
    }

    /// Between [`Session::handle_connected`] and the disconnect.
    pub fn is_connected(&self) -> bool {
        matches!(self.link, Link::Up(_))
    }

    // ─── the phase ──────────────────────────────────────────────────────────────

    /// The current connection's exchange, if connected.
    fn connection(&self) -> Option<&Connection> {
        match &self.link {
            Link::Up(c) => Some(c),
            Link::Down | Link::Connecting => None,
        }
    }

    /// The current connection's exchange, if connected (changes to a connection
    /// that is gone have nothing to change).
    fn connection_mut(&mut self) -> Option<&mut Connection> {
        match &mut self.link {
            Link::Up(c) => Some(c),
            Link::Down | Link::Connecting => None,
        }
    }

    /// How far this connection's Logon exchange got (`None` when not connected).
    fn handshake(&self) -> Handshake {
        self.connection().map_or(Sides::NONE, |c| c.logon)
    }

    fn reset_flag(&self) -> ResetFlag {
        self.connection().map_or(Sides::NONE, |c| c.reset)
    }

    fn set_reset_flag(&mut self, f: impl FnOnce(ResetFlag) -> ResetFlag) {
        if let Some(c) = self.connection_mut() {
            c.reset = f(c.reset);
        }
    }

    fn logout_sent(&self) -> bool {
        self.connection().is_some_and(|c| c.logout == Logout::Sent)
    }

    fn is_enabled(&self) -> bool {
        matches!(self.admin, Admin::Enabled)
    }

    /// The heartbeat interval in use (seconds): ours as initiator, the initiator's
    /// as acceptor once its Logon arrived.
    pub fn heart_bt_int(&self) -> u64 {
        self.heart_bt_int
    }

    /// MsgSeqNum of the next message we send.
    pub fn next_sender_seq(&self) -> u64 {
        self.store.next_sender_seq()
    }

    /// MsgSeqNum expected in the next message received.
    pub fn next_target_seq(&self) -> u64 {
        self.store.next_target_seq()
    }

    /// The next output, in order. Drain it (until None) after every other call.
    ///
    /// One queue rather than quinn's separate `poll_transmit` and `poll_event`: the
    /// outputs are ordered with respect to each other (bytes to send, then a
    /// `Disconnect` that must come after them, a `FromApp` event whose callback may
    /// send on this session), and a driver handling them in the order produced is what
    /// makes "the Logout is written before the socket closes" hold.
    pub fn poll_event(&mut self) -> Option<Output<'_>> {
        self.out.poll()
    }

    /// The field table of the [`Event::FromApp`] / [`Event::FromAdmin`] message last
    /// returned by [`Session::poll_event`] (empty after any other output): what the
    /// session parsed, so that a driver can hand the application that message with
    /// [`codec::MessageRef::from_parts`] instead of parsing it again.
    pub fn event_fields(&self) -> &[codec::Field] {
        self.out.polled_fields()
    }

    /// The bytes and field table of the [`Event::FromApp`] / [`Event::FromAdmin`]
    /// message last returned by [`Session::poll_event`], moved into `bytes` and
    /// `fields` (replacing what they held; both empty after any other output): for a
    /// driver that hands the message to a callback which may call this session. When
    /// the event was the last output queued (the steady state: one message in, one
    /// event out), the session's buffers are swapped with these instead of copied.
    /// Afterwards [`Session::event_fields`] is empty.
    pub fn take_event_message(&mut self, bytes: &mut Vec<u8>, fields: &mut Vec<codec::Field>) {
        self.out.take_polled(bytes, fields);
    }

    /// The latest time at which [`Session::handle_timeout`] must be called (it may be
    /// called earlier or more often: spurious calls do nothing). A deadline at or
    /// before the current time means "now" (e.g. a new initiator's first connection).
    /// None: nothing is scheduled (an acceptor that is not connected, or an
    /// initiator waiting for its driver's connection attempt).
    pub fn poll_timeout(&self) -> Option<UtcNanos> {
        self.deadline().map(UtcNanos)
    }

    fn deadline(&self) -> Option<u64> {
        let at = |since: u64, secs: u64| (since / NANOS).saturating_add(secs).saturating_mul(NANOS);
        let mut d: Option<u64> = None;
        let mut min = |t: u64| d = Some(d.map_or(t, |x: u64| x.min(t)));
        // With a schedule, look at the clock every second to notice the window's ends.
        let tick = || at(self.last_now, 1);
        if !self.is_connected() {
            if self.cfg.role == Role::Initiator
                && self.is_enabled()
                && !matches!(self.link, Link::Connecting)
            {
                match self.last_connect_attempt {
                    None => min(self.last_now),
                    Some(t) => min(at(t, u64::from(self.cfg.reconnect_interval))),
                }
                if self.cfg.schedule.is_some() {
                    min(tick());
                }
            }
            return d;
        }
        if self.cfg.schedule.is_some() {
            min(tick());
        }
        if let Some((at, _)) = self.dropped_ask {
            min(at);
        }
        if !self.handshake().received() {
            let since = match self.cfg.role {
                Role::Initiator if self.handshake().sent() => self.last_received,
                Role::Initiator => return Some(tick()),
                Role::Acceptor => self.connected_at,
            };
            min(at(since, u64::from(self.cfg.logon_timeout)));
            return d;
        }
        let hb = self.heart_bt_int;
        if hb == 0 {
            return d;
        }
        if self.logout_sent() {
            min(at(self.last_sent, u64::from(self.cfg.logout_timeout)));
        }
        if self.test_requests == 0 {
            min(at(self.last_sent, hb));
        }
        // Test request at 1.2 * (n + 1) * HeartBtInt of silence, disconnect at 2.4 *
        // (one `at` for both: it grows with its seconds).
        let test_request = (12 * (self.test_requests + 1) * hb).div_ceil(10);
        let disconnect = (24 * hb).div_ceil(10);
        min(at(self.last_received, test_request.min(disconnect)));
        d
    }

    /// The connection is up (initiator: after a [`Output::Connect`]; acceptor: the
    /// driver accepted a connection for this session). An initiator sends its Logon.
    pub fn handle_connected(&mut self, now: UtcNanos) {
        let now = now.as_nanos();
        self.enter(now);
        if self.is_connected() {
            return;
        }
        if !self.check_session_time(now) {
            // A new session period since the store was created: start afresh.
            self.note(format_args!(
                "Session time changed, resetting sequence numbers"
            ));
            let r = self.store.reset(now);
            self.fail_on_store_error(r);
        }
        self.link = Link::Up(Connection::default());
        self.connected_at = now;
        self.last_received = now;
        self.last_sent = now;
        self.test_requests = 0;
        if self.cfg.role == Role::Initiator {
            let r = self.timer(now);
            self.fail_on_store_error(r);
        }
    }

    /// The connection ended (closed by the peer, an IO error, or a failed connection
    /// attempt). Safe to call after the session asked for the disconnect itself.
    pub fn handle_disconnected(&mut self, now: UtcNanos) {
        let now = now.as_nanos();
        self.enter(now);
        // The driver knows: no Disconnect output for it.
        let was = std::mem::replace(&mut self.link, Link::Down);
        if matches!(was, Link::Up(_)) {
            self.note(format_args!("Connection closed"));
        }
        let r = self.after_disconnect(was, now);
        self.fail_on_store_error(r);
    }

    /// One complete message as framed by [`codec::frame_len`].
    pub fn handle_message(&mut self, now: UtcNanos, raw: &[u8]) {
        let now = now.as_nanos();
        self.enter(now);
        if !self.is_connected() {
            return;
        }
        let r = self.process(now, raw, false);
        self.fail_on_store_error(r);
    }

    /// The connection has room for more output (what was sent so far is mostly
    /// written): a resend in progress ([`Session::resend_pending`]) goes on by one step
    /// of at most `RESEND_CHUNK` (1,024) sequence numbers and `RESEND_STEP_BYTES` (1 MiB)
    /// of stored messages (plus the one that crosses it), and queued messages now in
    /// sequence ([`Session::queue_pending`]) by at most `QUEUE_CHUNK` (1,024). A resend of up to that many
    /// messages is answered whole when the ResendRequest arrives; a longer one waits
    /// for these calls, so a counterparty that does not read is never sent (nor
    /// buffered) more than a step ahead.
    pub fn handle_send_room(&mut self, now: UtcNanos) {
        let now = now.as_nanos();
        self.enter(now);
        if !self.is_connected() {
            return;
        }
        let r = self.retransmit_step(now);
        self.fail_on_store_error(r);
        if self.queue_pending() {
            let r = self.next_queued(now);
            self.fail_on_store_error(r);
        }
    }

    /// Heartbeats, test requests, logon/logout timeouts, the schedule and (initiator)
    /// reconnection. Call it at [`Session::poll_timeout`] at the latest.
    pub fn handle_timeout(&mut self, now: UtcNanos) {
        let now = now.as_nanos();
        self.enter(now);
        let r = if self.is_connected() {
            self.timer(now)
        } else {
            self.timer_disconnected(now)
        };
        self.fail_on_store_error(r);
    }

    /// Sends an application message: `body` is the encoded body fields
    /// (`tag=value<SOH>...`, in order, without header or trailer). Header fields
    /// the application sets (e.g. PossResend 97, OnBehalfOfCompID 115) go first in
    /// `body`. The message gets the next MsgSeqNum and is stored (PersistMessages);
    /// it is transmitted now if logged on, otherwise it waits in the store for the
    /// counterparty's ResendRequest after the next logon, as in QuickFIX. Returns the
    /// MsgSeqNum.
    pub fn send_app(
        &mut self,
        now: UtcNanos,
        msg_type: &[u8],
        body: &[u8],
    ) -> Result<u64, SendError> {
        self.send_app_with(now, msg_type, |enc| enc.raw_fields(body))
    }

    /// Like [`Session::send_app`], with the body written by `write_body` straight
    /// into the session's encoder (only `field*`/`raw_fields` calls, no `begin` or
    /// `finish`).
    pub fn send_app_with(
        &mut self,
        now: UtcNanos,
        msg_type: &[u8],
        write_body: impl FnOnce(&mut Encoder),
    ) -> Result<u64, SendError> {
        let now = now.as_nanos();
        self.enter(now);
        if is_admin(msg_type) {
            return Err(SendError::AdminMsgType(
                String::from_utf8_lossy(msg_type).into_owned(),
            ));
        }
        if !self.is_logged_on() && self.should_send_reset() {
            return Err(SendError::WouldBeReset);
        }
        let seq = self.store.next_sender_seq();
        self.header(now, msg_type, seq, false, None);
        write_body(&mut self.enc);
        self.finish_app(seq).map_err(SendError::Store)?;
        Ok(seq)
    }

    /// Answers an application message the application does not support, as QuickFIX
    /// does when `fromApp` throws `UnsupportedMessageType`: a BusinessMessageReject
    /// (35=j, 380=3) from FIX.4.2 on, a Reject (35=3) with 58 "Unsupported message
    /// type" before. `ref_seq`/`ref_msg_type` are the rejected message's 34/35.
    pub fn reject_unsupported(
        &mut self,
        now: UtcNanos,
        ref_seq: u64,
        ref_msg_type: &[u8],
    ) -> Result<(), SendError> {
        let (now, r) = self.app_reject_ref(now, ref_seq, ref_msg_type)?;
        if self.ver.ge42 {
            self.business_reject(now, r, business_reject::UNSUPPORTED_MESSAGE_TYPE, 0, false)
        } else {
            self.reject_with_text(now, r, "Unsupported message type", false)
        }
        .map_err(SendError::Store)
    }

    /// Sends a BusinessMessageReject (35=j) for an application message, with
    /// BusinessRejectReason (380) `reason` and QuickFIX's text (with ` (tag)` when
    /// `ref_tag` is not 0).
    pub fn reject_business(
        &mut self,
        now: UtcNanos,
        ref_seq: u64,
        ref_msg_type: &[u8],
        reason: u32,
        ref_tag: u32,
    ) -> Result<(), SendError> {
        let (now, r) = self.app_reject_ref(now, ref_seq, ref_msg_type)?;
        self.business_reject(now, r, reason, ref_tag, false)
            .map_err(SendError::Store)
    }

    /// Sends a session-level Reject (35=3) for an application message the
    /// application found invalid (QuickFIX: `fromApp` throwing `IncorrectTagValue`
    /// and friends), with SessionRejectReason `reason` and RefTagID `ref_tag` (0:
    /// none).
    pub fn reject_session(
        &mut self,
        now: UtcNanos,
        ref_seq: u64,
        ref_msg_type: &[u8],
        reason: u32,
        ref_tag: u32,
    ) -> Result<(), SendError> {
        let (now, r) = self.app_reject_ref(now, ref_seq, ref_msg_type)?;
        self.reject_quiet(now, r, reason, ref_tag, false)
            .map_err(SendError::Store)
    }

    /// What the application's rejects share: the clock enters, a session not logged on
    /// refuses, and the rejected message is named by its 34/35.
    fn app_reject_ref<'m>(
        &mut self,
        now: UtcNanos,
        ref_seq: u64,
        ref_msg_type: &'m [u8],
    ) -> Result<(u64, RefMsg<'m>), SendError> {
        let now = now.as_nanos();
        self.enter(now);
        if !self.is_logged_on() {
            return Err(SendError::NotLoggedOn);
        }
        let r = RefMsg {
            seq: Some(ref_seq),
            msg_type: ref_msg_type,
            route: Route::default(),
        };
        Ok((now, r))
    }

    /// Ends the session: sends a Logout (58 = `text`) if logged on, then waits for
    /// the answer up to LogoutTimeout before disconnecting. The session stays
    /// disabled (no logon accepted, no reconnection) until [`Session::logon`]. If the
    /// connection is up but not logged on, it is closed at once.
    pub fn logout(&mut self, now: UtcNanos, text: Option<&str>) {
        let now = now.as_nanos();
        self.enter(now);
        self.admin = Admin::Disabled {
            logout_text: text.unwrap_or("").to_owned(),
        };
        let r = if self.is_connected() && !self.is_logged_on() {
            self.disconnect(now)
        } else if self.is_connected() {
            self.timer(now)
        } else {
            Ok(())
        };
        self.fail_on_store_error(r);
    }

    /// Enables the session again after [`Session::logout`] (QuickFIX
    /// `Session::logon`): an initiator reconnects and logs on, an acceptor accepts
    /// Logons.
    pub fn logon(&mut self, now: UtcNanos) {
        let now = now.as_nanos();
        self.enter(now);
        self.admin = Admin::Enabled;
    }

    /// QuickFIX `Session::reset`: Logout (if connected), disconnect, and reset both
    /// sequence numbers to 1 with an empty store.
    pub fn reset(&mut self, now: UtcNanos) {
        let now = now.as_nanos();
        self.enter(now);
        let r = self.reset_session(now);
        self.fail_on_store_error(r);
    }

    // ─── entry-point plumbing ───────────────────────────────────────────────────

    fn enter(&mut self, now: u64) {
        self.out.recycle();
        self.last_now = now;
        self.queue_budget = QUEUE_CHUNK;
    }

    fn fail_on_store_error(&mut self, r: StoreResult) {
        if let Err(e) = r {
            self.note(format_args!("Message store error: {e}"));
            // Disconnecting must not touch the store again if it is broken; the
            // ResetOnDisconnect reset is skipped here on purpose.
            self.drop_connection();
        }
    }

    fn note(&mut self, args: std::fmt::Arguments<'_>) {
        self.out.note(args);
    }

    // ─── timers ─────────────────────────────────────────────────────────────────

    fn timer_disconnected(&mut self, now: u64) -> StoreResult {
        if self.cfg.role != Role::Initiator
            || !self.is_enabled()
            || matches!(self.link, Link::Connecting)
        {
            return Ok(());
        }
        if !self.is_session_time(now) {
            return Ok(());
        }
        let due = match self.last_connect_attempt {
            None => true,
            Some(t) => secs_between(now, t) >= i64::from(self.cfg.reconnect_interval),
        };
        if due {
            self.last_connect_attempt = Some(now);
            self.link = Link::Connecting;
            self.out.connect();
        }
        Ok(())
    }

    /// QuickFIX `Session::next(now)`.
    fn timer(&mut self, now: u64) -> StoreResult {
        if !self.is_connected() {
            return Ok(());
        }
        if !self.check_session_time(now) {
            return self.reset_session(now);
        }
        if !self.is_enabled() || !self.is_session_time(now) {
            if !self.is_logged_on() {
                return Ok(());
            }
            if !self.logout_sent() {
                self.note(format_args!("Initiated logout request"));
                let reason = match &mut self.admin {
                    Admin::Disabled { logout_text } => std::mem::take(logout_text),
                    Admin::Enabled => String::new(),
                };
                let r = self.logout_msg(now, Some(&reason));
                if let Admin::Disabled { logout_text } = &mut self.admin {
                    *logout_text = reason;
                }
                r?;
            }
        }
        if !self.handshake().received() {
            if self.cfg.role == Role::Initiator && !self.handshake().sent() {
                if self.is_enabled() && self.is_session_time(now) {
                    self.logon_msg(now)?;
                    self.note(format_args!("Initiated logon request"));
                }
            } else if self.cfg.role == Role::Initiator {
                if secs_between(now, self.last_received) >= i64::from(self.cfg.logon_timeout) {
                    self.note(format_args!("Timed out waiting for logon response"));
                    self.disconnect(now)?;
                }
            } else if secs_between(now, self.connected_at) >= i64::from(self.cfg.logon_timeout) {
                self.note(format_args!("Timed out waiting for logon request"));
                self.disconnect(now)?;
            }
            return Ok(());
        }
        if self.dropped_ask.is_some_and(|(at, _)| now >= at) {
            self.dropped_ask_due(now)?;
        }
        let hb = self.heart_bt_int as i64;
        if hb == 0 {
            return Ok(());
        }
        let since_sent = secs_between(now, self.last_sent);
        let since_received = secs_between(now, self.last_received);
        if self.logout_sent() && since_sent >= i64::from(self.cfg.logout_timeout) {
            self.note(format_args!("Timed out waiting for logout response"));
            return self.disconnect(now);
        }
        if since_sent < hb && since_received < hb {
            return Ok(());
        }
        let k = self.test_requests as i64;
        if since_received * 10 >= 24 * hb {
            self.note(format_args!("Timed out waiting for heartbeat"));
            self.disconnect(now)?;
        } else if since_received * 10 >= 12 * (k + 1) * hb {
            self.test_request_msg(now, b"TEST")?;
            self.test_requests += 1;
            self.note(format_args!("Sent test request TEST"));
        } else if since_sent >= hb && k == 0 {
            self.heartbeat_msg(now, None)?;
        }
        Ok(())
    }

    fn is_session_time(&self, now: u64) -> bool {
        self.schedule_state(now).0
    }

    /// QuickFIX `checkSessionTime`: the store was created in the current session
    /// period. A store created outside every period is not reset again while the
    /// clock is still outside (QuickFIX would reset it at every timer tick).
    fn check_session_time(&self, now: u64) -> bool {
        self.schedule_state(now).1
    }

    /// (inside a session period, store created in the current period), evaluated at
    /// whole seconds and cached per second so that a schedule costs no time-zone
    /// arithmetic per message.
    fn schedule_state(&self, now: u64) -> (bool, bool) {
        let Some(s) = self.cfg.schedule.as_ref() else {
            return (true, true);
        };
        let sec = now / NANOS;
        let created = self.store.creation_time();
        if let Some((k, c, inside, same)) = self.schedule_cache.get() {
            if k == sec && c == created {
                return (inside, same);
            }
        }
        let p_now = s.period_start(sec * NANOS);
        let same = match (p_now, s.period_start(created)) {
            (Some(a), Some(b)) => a == b,
            (None, None) => true,
            _ => false,
        };
        self.schedule_cache
            .set(Some((sec, created, p_now.is_some(), same)));
        (p_now.is_some(), same)
    }

    fn reset_session(&mut self, now: u64) -> StoreResult {
        if self.is_connected() {
            self.logout_msg(now, None)?;
        }
        self.disconnect(now)?;
        self.store.reset(now)
    }

    /// QuickFIX `disconnect()`: drop the connection, report the logout, clear the
    /// per-connection state.
    fn disconnect(&mut self, now: u64) -> StoreResult {
        let was = self.take_connection();
        self.after_disconnect(was, now)
    }

    /// The rest of [`Session::disconnect`] once the link is down: `was` is what it was.
    fn after_disconnect(&mut self, was: Link, now: u64) -> StoreResult {
        self.connection_gone(was);
        if self.cfg.reset_on_disconnect {
            self.store.reset(now)?;
        }
        Ok(())
    }

    fn drop_connection(&mut self) {
        let was = self.take_connection();
        self.connection_gone(was);
    }

    /// Asks the driver to close the connection, if there is one; returns the link as it
    /// was (a connection attempt in progress stays in progress).
    fn take_connection(&mut self) -> Link {
        if !self.is_connected() {
            return Link::Down;
        }
        self.note(format_args!("Disconnecting"));
        self.out.disconnect();
        std::mem::replace(&mut self.link, Link::Down)
    }

    /// Keeps `buf` for the next queued message, unless it is large or enough are kept.
    fn recycle(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() <= SPARE_BUF_KEEP && self.spare_bufs.len() < MAX_SPARE_BUFS {
            buf.clear();
            self.spare_bufs.push(buf);
        }
    }

    /// Clears what belonged to the connection `was` (the link is no longer up).
    fn connection_gone(&mut self, was: Link) {
        if let Link::Up(c) = was {
            if c.logon != Sides::NONE {
                self.out.logged_out();
            }
        }
        self.test_requests = 0;
        self.resend = None;
        while let Some((_, buf)) = self.queue.pop_first() {
            self.recycle(buf);
        }
        self.queued_bytes = 0;
        self.queue_dropped = None;
        self.dropped_ask = None;
        self.resend_seen = false;
        if self.cfg.role == Role::Acceptor {
            self.heart_bt_int = 0;
        }
    }
}

/// Displays an optional MsgSeqNum as QuickFIX does (empty when absent).
struct SeqText(Option<u64>);

impl std::fmt::Display for SeqText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(s) => write!(f, "{s}"),
            None => Ok(()),
        }
    }
}

/// Whole seconds between two instants the way QuickFIX subtracts timestamps: both
/// truncated to the second first.
fn secs_between(now: u64, then: u64) -> i64 {
    (now / NANOS) as i64 - (then / NANOS) as i64
}

/// Standard trailer tags (QuickFIX `Message::isTrailerField`): SignatureLength,
/// Signature, CheckSum.
pub fn is_trailer_tag(t: u32) -> bool {
    matches!(t, 89 | 93 | 10)
}

/// QuickFIX `Message::isAdminMsgType`.
fn is_admin(msg_type: &[u8]) -> bool {
    matches!(msg_type, [b'0' | b'1' | b'2' | b'3' | b'4' | b'5' | b'A'])
}

/// Standard header tags (QuickFIX `Message::isHeaderField`).
pub fn is_header_tag(t: u32) -> bool {
    matches!(
        t,
        8 | 9
            | 35
            | 34
            | 43
            | 49
            | 50
            | 52
            | 56
            | 57
            | 90
            | 91
            | 97
            | 115
            | 116
            | 122
            | 128
            | 129
            | 142
            | 143
            | 144
            | 145
            | 212
            | 213
            | 347
            | 369
            | 627
            | 628
            | 629
            | 630
            | 1128
            | 1129
            | 1156
    )
}

fn digits(mut n: u32) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// The value of the first `tag=` field in a raw message, by plain scanning (for
/// messages the parser refused).
fn scan_field(raw: &[u8], t: u32) -> Option<&[u8]> {
    let mut pos = 0;
    while pos < raw.len() {
        let end = raw[pos..]
            .iter()
            .position(|&b| b == codec::SOH)
            .map_or(raw.len(), |i| pos + i);
        let field = &raw[pos..end];
        if let Some(eq) = field.iter().position(|&b| b == b'=') {
            if codec::parse_u64(&field[..eq]) == Some(u64::from(t)) {
                return Some(&field[eq + 1..]);
            }
        }
        pos = end + 1;
    }
    None
}
