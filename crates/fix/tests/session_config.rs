//! A QuickFIX settings file section becomes a [`SessionConfig`] with the same meaning.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tickwire_fix::session::{Role, Schedule, SessionConfig, Zone};
use tickwire_fix::settings::Settings;

#[test]
fn quickfix_settings_section_maps_to_session_config() {
    let text = "[DEFAULT]\nConnectionType=initiator\nSocketConnectHost=localhost\n\
                SocketConnectPort=9876\nHeartBtInt=20\nReconnectInterval=5\n\
                StartTime=08:00:00\nEndTime=17:00:00\nTimeZone=America/New_York\n\
                [SESSION]\nBeginString=FIXT.1.1\nSenderCompID=TW\nSenderSubID=DESK\n\
                TargetCompID=CP\nDefaultApplVerID=FIX.5.0SP2\nResetOnLogon=Y\n\
                MaxLatency=30\nCheckCompID=N\nLogonTimeout=4\nLogoutTimeout=3\n\
                ResendRequestChunkSize=500\nPersistMessages=N\nTimestampPrecision=6\n\
                SendNextExpectedMsgSeqNum=Y\n";
    let settings = Settings::parse(text, "test.cfg").expect("valid settings");
    let c = SessionConfig::from_settings(&settings.sessions[0]).expect("valid session");
    assert_eq!(c.begin_string, "FIXT.1.1");
    assert_eq!(
        (c.sender_comp_id.as_str(), c.target_comp_id.as_str()),
        ("TW", "CP")
    );
    assert_eq!(c.sender_sub_id.as_deref(), Some("DESK"));
    assert_eq!(c.target_sub_id, None);
    assert_eq!(c.role, Role::Initiator);
    assert_eq!(c.heart_bt_int, 20);
    assert_eq!(c.reconnect_interval, 5);
    assert_eq!(c.default_appl_ver_id, "9");
    assert!(c.reset_on_logon && !c.reset_on_logout && !c.persist_messages && !c.check_comp_id);
    assert_eq!(
        (c.max_latency, c.logon_timeout, c.logout_timeout),
        (30, 4, 3)
    );
    assert_eq!(c.resend_request_chunk_size, 500);
    assert!(c.send_next_expected_msg_seq_num);
    assert!(settings.warnings.is_empty(), "{:?}", settings.warnings);
    assert_eq!(
        c.effective_precision(),
        tickwire_fix::codec::TimestampPrecision::Micros
    );
    let expected = Schedule::daily(
        Schedule::parse_time("08:00:00").unwrap(),
        Schedule::parse_time("17:00:00").unwrap(),
    )
    .in_zone(Zone::Named(chrono_tz::America::New_York));
    assert_eq!(c.schedule, Some(expected));
}

#[test]
fn a_session_can_move_to_its_driver_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<tickwire_fix::session::Session<tickwire_fix::store::MemoryStore>>();
    assert_send::<tickwire_fix::session::Session<tickwire_fix::store::FileStore>>();
    // And a bad configuration is refused up front.
    let c = SessionConfig::new("FIX.9.9", "TW", "CP", Role::Acceptor);
    assert!(c.check().is_err());
    let c = SessionConfig::new("FIX.4.4", "", "CP", Role::Acceptor);
    assert!(c.check().is_err());
}
