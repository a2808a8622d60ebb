//! Typed session configuration. Field names follow the QuickFIX settings keys
//! (`HeartBtInt` → `heart_bt_int`, `ResetOnLogon` → `reset_on_logon`, ...) and the
//! defaults are QuickFIX/C++ 1.16's.

use super::schedule::{Schedule, Zone};
use crate::codec::TimestampPrecision;
use crate::settings::{ConnectionType, SessionSettings};

/// Which side opens the TCP connection and sends the first Logon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Connects, sends Logon first (`ConnectionType=initiator`).
    Initiator,
    /// Accepts, answers the counterparty's Logon (`ConnectionType=acceptor`).
    Acceptor,
}

/// Everything one session needs to know. Build it with [`SessionConfig::new`] and
/// change the public fields; [`SessionConfig::check`] reports impossible combinations.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// `BeginString` (8): `FIX.4.0` ... `FIX.4.4` or `FIXT.1.1`.
    pub begin_string: String,
    /// `SenderCompID` (49) of our messages.
    pub sender_comp_id: String,
    /// `TargetCompID` (56) of our messages.
    pub target_comp_id: String,
    /// `SenderSubID` (50), written in every message when set.
    pub sender_sub_id: Option<String>,
    /// `SenderLocationID` (142), written in every message when set.
    pub sender_location_id: Option<String>,
    /// `TargetSubID` (57), written in every message when set.
    pub target_sub_id: Option<String>,
    /// `TargetLocationID` (143), written in every message when set.
    pub target_location_id: Option<String>,
    /// Initiator or acceptor (`ConnectionType`).
    pub role: Role,
    /// `HeartBtInt` in seconds, sent in the initiator's Logon (108). An acceptor uses
    /// the value the initiator sends. 0 disables heartbeats and test requests.
    /// Default 30.
    pub heart_bt_int: u32,
    /// `ResetOnLogon`: reset both sequence numbers to 1 at every logon (and send
    /// ResetSeqNumFlag 141=Y). Default false.
    pub reset_on_logon: bool,
    /// `ResetOnLogout`: reset after a logout exchange. Default false.
    pub reset_on_logout: bool,
    /// `ResetOnDisconnect`: reset whenever the connection ends. Default false.
    pub reset_on_disconnect: bool,
    /// `SendRedundantResendRequests`: send a ResendRequest for every too-high
    /// message even while one is outstanding. Default false.
    pub send_redundant_resend_requests: bool,
    /// `ResendRequestChunkSize` (QuickFIX/J key): ask for at most this many messages
    /// per ResendRequest, the next chunk once the previous one is filled. 0 (default)
    /// asks for everything at once (EndSeqNo 0, or 999999 before FIX.4.2).
    pub resend_request_chunk_size: u64,
    /// `PersistMessages`: keep sent messages in the store so they can be resent.
    /// When false, a ResendRequest is answered with one SequenceReset-GapFill.
    /// Default true.
    pub persist_messages: bool,
    /// `CheckCompID`: reject messages whose 49/56 are not our 56/49. Default true.
    pub check_comp_id: bool,
    /// `CheckLatency`: reject messages whose SendingTime (52) is more than
    /// `max_latency` seconds from now. Default true.
    pub check_latency: bool,
    /// `MaxLatency` in seconds. Default 120.
    pub max_latency: u32,
    /// `LogonTimeout` in seconds: how long an initiator waits for the Logon answer
    /// (and, an extension, how long an acceptor waits for the first Logon after
    /// [`Session::handle_connected`](super::Session::handle_connected)). Default 10.
    pub logon_timeout: u32,
    /// `LogoutTimeout` in seconds: how long to wait for the Logout answer. Default 2.
    pub logout_timeout: u32,
    /// `ReconnectInterval` in seconds between an initiator's connection attempts.
    /// Default 30.
    pub reconnect_interval: u32,
    /// `TimestampPrecision` of SendingTime and OrigSendingTime. None (default): the
    /// QuickFIX default, milliseconds for FIX.4.2 and later; FIX.4.0/4.1 always use
    /// seconds, whatever is set, as QuickFIX does.
    pub timestamp_precision: Option<TimestampPrecision>,
    /// `DefaultApplVerID` (1137) sent in the Logon of a FIXT.1.1 session. Default
    /// "7" (FIX.5.0, QuickFIX's built-in default; QuickFIX requires the key).
    pub default_appl_ver_id: String,
    /// Not a QuickFIX setting, but what QuickFIX's acceptance-test application does in
    /// its `fromAdmin` (`setSenderDefaultApplVerID`): a FIXT session takes the
    /// DefaultApplVerID of the counterparty's Logon as its own, before answering it,
    /// so the answer and everything after carry the counterparty's version. Default
    /// false; `tickwire fix acceptor --app echo` sets it.
    pub adopt_counterparty_default_appl_ver_id: bool,
    /// `SendNextExpectedMsgSeqNum`: put NextExpectedMsgSeqNum (789) in our Logon.
    /// Default false.
    pub send_next_expected_msg_seq_num: bool,
    /// Extra fields for our Logon (initiator and answer), e.g. Username (553) and
    /// Password (554); QuickFIX applications add them in `toAdmin`. Written in tag
    /// order among the session's own Logon fields, which they may not repeat.
    pub logon_fields: Vec<(u32, String)>,
    /// `StartTime`/`EndTime`/`StartDay`/`EndDay`/`TimeZone`/`UseLocalTime`: when
    /// the session may be logged on; None = `NonStopSession=Y`.
    pub schedule: Option<Schedule>,
}

impl SessionConfig {
    /// A configuration with QuickFIX's defaults for everything else.
    pub fn new(begin_string: &str, sender_comp_id: &str, target_comp_id: &str, role: Role) -> Self {
        SessionConfig {
            begin_string: begin_string.to_owned(),
            sender_comp_id: sender_comp_id.to_owned(),
            target_comp_id: target_comp_id.to_owned(),
            sender_sub_id: None,
            sender_location_id: None,
            target_sub_id: None,
            target_location_id: None,
            role,
            heart_bt_int: 30,
            reset_on_logon: false,
            reset_on_logout: false,
            reset_on_disconnect: false,
            send_redundant_resend_requests: false,
            resend_request_chunk_size: 0,
            persist_messages: true,
            check_comp_id: true,
            check_latency: true,
            max_latency: 120,
            logon_timeout: 10,
            logout_timeout: 2,
            reconnect_interval: 30,
            timestamp_precision: None,
            default_appl_ver_id: "7".to_owned(),
            adopt_counterparty_default_appl_ver_id: false,
            send_next_expected_msg_seq_num: false,
            logon_fields: Vec::new(),
            schedule: None,
        }
    }

    /// The session part of a QuickFIX `[SESSION]` (see `settings.rs`): identity,
    /// role, timers, reset and resend switches, CompID/latency checks, timestamp
    /// precision, DefaultApplVerID (`FIX.5.0SP2` or `9` forms) and the schedule
    /// (StartTime/EndTime, StartDay/EndDay, TimeZone, UseLocalTime, NonStopSession).
    /// Dictionaries, store and socket keys are the driver's business.
    pub fn from_settings(s: &SessionSettings) -> Result<SessionConfig, ConfigError> {
        let id = &s.id;
        let role = match s.connection_type {
            ConnectionType::Initiator => Role::Initiator,
            ConnectionType::Acceptor => Role::Acceptor,
        };
        let opt = |v: &String| (!v.is_empty()).then(|| v.clone());
        let mut c = SessionConfig::new(
            &id.begin_string,
            &id.sender_comp_id,
            &id.target_comp_id,
            role,
        );
        c.sender_sub_id = opt(&id.sender_sub_id);
        c.sender_location_id = opt(&id.sender_location_id);
        c.target_sub_id = opt(&id.target_sub_id);
        c.target_location_id = opt(&id.target_location_id);
        c.heart_bt_int = s.heartbt_int.unwrap_or(30);
        c.reset_on_logon = s.reset_on_logon;
        c.reset_on_logout = s.reset_on_logout;
        c.reset_on_disconnect = s.reset_on_disconnect;
        c.send_redundant_resend_requests = s.send_redundant_resend_requests;
        c.send_next_expected_msg_seq_num = s.send_next_expected_msg_seq_num;
        c.resend_request_chunk_size = u64::from(s.resend_request_chunk_size);
        c.persist_messages = s.persist_messages;
        c.check_comp_id = s.check_comp_id;
        c.check_latency = s.check_latency;
        c.max_latency = s.max_latency;
        c.logon_timeout = s.logon_timeout;
        c.logout_timeout = s.logout_timeout;
        c.reconnect_interval = s.reconnect_interval;
        c.timestamp_precision = Some(s.timestamp_precision);
        if let Some(v) = &s.default_appl_ver_id {
            c.default_appl_ver_id = appl_ver_id(v).to_owned();
        }
        c.schedule = match (s.non_stop_session, s.start_time, s.end_time) {
            (false, Some(start), Some(end)) => {
                let sched = match (s.start_day, s.end_day) {
                    (Some(sd), Some(ed)) => Schedule::weekly(sd, start, ed, end),
                    _ => Schedule::daily(start, end),
                };
                let zone = if s.use_local_time {
                    Zone::Local
                } else if let Some(tz) = s.time_zone {
                    Zone::Named(tz)
                } else {
                    Zone::Utc
                };
                Some(sched.in_zone(zone))
            }
            _ => None,
        };
        c.check()?;
        Ok(c)
    }

    /// Reports a configuration the session cannot run with.
    pub fn check(&self) -> Result<(), ConfigError> {
        const KNOWN: [&str; 6] = [
            "FIX.4.0", "FIX.4.1", "FIX.4.2", "FIX.4.3", "FIX.4.4", "FIXT.1.1",
        ];
        if !KNOWN.contains(&self.begin_string.as_str()) {
            return Err(ConfigError::BeginString(self.begin_string.clone()));
        }
        for (key, v) in [
            ("SenderCompID", &self.sender_comp_id),
            ("TargetCompID", &self.target_comp_id),
        ] {
            if v.is_empty() || v.bytes().any(|b| b == crate::codec::SOH || b == b'=') {
                return Err(ConfigError::CompId(key));
            }
        }
        for (t, v) in &self.logon_fields {
            let own = [98, 108, 141, 789, 1137].contains(t) || *t == 0;
            if own || v.is_empty() || v.bytes().any(|b| b == crate::codec::SOH) {
                return Err(ConfigError::LogonField(*t));
            }
        }
        if self.begin_string == "FIXT.1.1" && self.default_appl_ver_id.is_empty() {
            return Err(ConfigError::DefaultApplVerId);
        }
        Ok(())
    }

    /// The precision actually used for SendingTime: seconds before FIX.4.2.
    pub fn effective_precision(&self) -> TimestampPrecision {
        if Version::of(&self.begin_string).sub_second {
            self.timestamp_precision
                .unwrap_or(TimestampPrecision::Millis)
        } else {
            TimestampPrecision::Seconds
        }
    }
}

/// ApplVerID (1128/1137) code for a DefaultApplVerID setting or an
/// `AppDataDictionary.<version>` suffix, as QuickFIX's `Message::toApplVerID`: the
/// BeginString form (`FIX.5.0SP2` → `9`); anything else is taken as a code already.
pub(crate) fn appl_ver_id(v: &str) -> &str {
    match v {
        "FIX.2.7" => "0",
        "FIX.3.0" => "1",
        "FIX.4.0" => "2",
        "FIX.4.1" => "3",
        "FIX.4.2" => "4",
        "FIX.4.3" => "5",
        "FIX.4.4" => "6",
        "FIX.5.0" => "7",
        "FIX.5.0SP1" => "8",
        "FIX.5.0SP2" => "9",
        other => other,
    }
}

/// A [`SessionConfig`] the session cannot run with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// BeginString is not one of FIX.4.0 ... FIX.4.4, FIXT.1.1.
    #[error("unsupported BeginString {0:?} (expected FIX.4.0 to FIX.4.4 or FIXT.1.1)")]
    BeginString(String),
    /// A CompID is empty or contains SOH or '='.
    #[error("{0} must be non-empty and contain neither SOH nor '='")]
    CompId(&'static str),
    /// An extra Logon field repeats one the session writes (98, 108, 141, 789,
    /// 1137), has tag 0, or has an empty value or one containing SOH.
    #[error("extra Logon field {0} is not allowed (session field, tag 0, empty or SOH)")]
    LogonField(u32),
    /// FIXT.1.1 without DefaultApplVerID.
    #[error("DefaultApplVerID is required for FIXT.1.1 sessions")]
    DefaultApplVerId,
}

/// Version-dependent behaviour, derived once from the BeginString with QuickFIX's
/// string comparisons (`FIXT.1.1` sorts after every `FIX.4.x`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Version {
    /// BeginString >= FIX.4.2: Reject carries 372/373, EndSeqNo 0 means infinity,
    /// unsupported message types get a BusinessMessageReject.
    pub ge42: bool,
    /// BeginString > FIX.4.2: every SessionRejectReason is sent (4.2 only up to 11).
    pub gt42: bool,
    /// BeginString <= FIX.4.2: EndSeqNo 999999 means infinity when received.
    pub le42: bool,
    /// BeginString >= FIX.4.1: ResetSeqNumFlag exists.
    pub ge41: bool,
    /// FIXT.1.1: Logon carries DefaultApplVerID (1137).
    pub fixt: bool,
    /// Sub-second SendingTime allowed (FIX.4.2 and later).
    pub sub_second: bool,
}

impl Version {
    pub fn of(begin_string: &str) -> Version {
        let b = begin_string;
        Version {
            ge42: b >= "FIX.4.2",
            gt42: b > "FIX.4.2",
            le42: b <= "FIX.4.2",
            ge41: b >= "FIX.4.1",
            fixt: b.starts_with("FIXT"),
            sub_second: b >= "FIX.4.2",
        }
    }
}
