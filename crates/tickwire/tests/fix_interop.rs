//! Interop: the real `tickwire fix` binary against a real QuickFIX/C++ peer
//! (`tools/quickfix/qf_peer`, built on demand by scripts/install-quickfix.sh, with the
//! dictionaries of scripts/fetch-fix-spec.sh), both directions, on 127.0.0.1.
//!
//! QuickFIX runs its `echo` application (NewOrderSingle → ExecutionReport, Email →
//! Email, anything else → BusinessMessageReject) with `UseDataDictionary=Y` and its
//! file store; tickwire runs `--app log` with its file store and sends what the test
//! types on its standard input. Every wait is on a stdout line and bounded.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fix_support;

use std::path::{Path, PathBuf};

use fix_support::{field, free_port, quickfix, temp_dir, Peer};

const ORDER: &str = "21=1|38=100|40=1|54=1|55=IBM|60=20240101-00:00:00";

fn write_cfg(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Our initiator's settings: FIX.4.4 (and FIX.4.2 when `fix42`) TW → QF on `port`.
fn initiator_cfg(dir: &Path, port: u16, fix42: bool, extra: &str) -> PathBuf {
    let mut text = format!(
        "[DEFAULT]\nConnectionType=initiator\nSocketConnectHost=127.0.0.1\n\
         SocketConnectPort={port}\nStartTime=00:00:00\nEndTime=00:00:00\nHeartBtInt=30\n\
         ReconnectInterval=1\nFileStorePath={}\n{extra}\n\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID=TW\nTargetCompID=QF\n",
        dir.join("tw-store").display()
    );
    if fix42 {
        text.push_str("\n[SESSION]\nBeginString=FIX.4.2\nSenderCompID=TW\nTargetCompID=QF\n");
    }
    write_cfg(dir, "tw-initiator.cfg", &text)
}

/// Our acceptor's settings: FIX.4.4 TW ← QF on `port`.
fn acceptor_cfg(dir: &Path, port: u16) -> PathBuf {
    let text = format!(
        "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptHost=127.0.0.1\n\
         SocketAcceptPort={port}\nStartTime=00:00:00\nEndTime=00:00:00\n\
         FileStorePath={}\n\n\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID=TW\nTargetCompID=QF\n",
        dir.join("tw-store").display()
    );
    write_cfg(dir, "tw-acceptor.cfg", &text)
}

/// Where a test's initiator runs: its directory (removed when the run drops: keep the
/// run until both peers have exited), QuickFIX's port, its settings file.
struct InitiatorRun {
    dir: tempfile::TempDir,
    port: u16,
    cfg: PathBuf,
}

/// QuickFIX's acceptor (store in `<dir>/qf`) and our initiator (FIX.4.4, and FIX.4.2
/// when `fix42`) in a fresh directory `name`, the FIX.4.4 session logged on.
fn initiator_against_quickfix(name: &str, fix42: bool) -> (InitiatorRun, Peer, Peer) {
    let dir = temp_dir(name);
    let port = free_port();
    let qf = quickfix(
        "quickfix acceptor",
        "interop-acceptor.cfg",
        port,
        &dir.path().join("qf"),
    );
    let cfg = initiator_cfg(dir.path(), port, fix42, "");
    let mut tw = Peer::tickwire("tickwire initiator", "initiator", &cfg, "log");
    tw.wait(&["LOGON", S44]);
    (InitiatorRun { dir, port, cfg }, qf, tw)
}

fn seq(line: &str) -> u64 {
    field(line, 34)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no MsgSeqNum in {line}"))
}

const S44: &str = "FIX.4.4:TW->QF";
const S42: &str = "FIX.4.2:TW->QF";
const Q44: &str = "FIX.4.4:QF->TW";

/// Logon on two sessions (FIX.4.4 and FIX.4.2), application messages both ways
/// (orders → execution reports, email → email, an unsupported message → QuickFIX's
/// BusinessMessageReject), logout.
#[test]
fn our_initiator_with_quickfix_acceptor_exchanges_application_messages_on_fix44_and_fix42() {
    let (_run, mut qf, mut tw) = initiator_against_quickfix("interop-basic", true);
    tw.wait_ever(&["LOGON", S42]);
    qf.wait(&["EVENT", Q44, "Received logon request"]);

    tw.send(&format!("{S44} 35=D|11=ORD1|{ORDER}"));
    let report = tw.wait(&["IN", S44, "|35=8|", "|11=ORD1|"]);
    assert_eq!(field(&report, 39).as_deref(), Some("0"), "{report}");
    assert_eq!(field(&report, 55).as_deref(), Some("IBM"), "{report}");
    qf.wait(&["IN", Q44, "|35=D|", "|11=ORD1|"]);

    tw.send(&format!(
        "{S44} 35=C|164=T1|94=0|147=hello|33=1|58=first line"
    ));
    let email = tw.wait(&["IN", S44, "|35=C|"]);
    assert_eq!(field(&email, 147).as_deref(), Some("hello"), "{email}");
    assert_eq!(field(&email, 58).as_deref(), Some("first line"), "{email}");

    // QuoteRequest is not something QuickFIX's echo supports.
    tw.send(&format!("{S44} 35=R|131=Q1|146=1|55=IBM"));
    let bmr = tw.wait(&["IN", S44, "|35=j|"]);
    assert_eq!(field(&bmr, 380).as_deref(), Some("3"), "{bmr}");
    assert_eq!(field(&bmr, 372).as_deref(), Some("R"), "{bmr}");

    tw.send(&format!(
        "{S42} 35=D|11=ORD42|21=1|38=5|40=1|54=2|55=MSFT|60=20240101-00:00:00"
    ));
    let report42 = tw.wait(&["IN", S42, "|35=8|", "|11=ORD42|"]);
    assert_eq!(field(&report42, 20).as_deref(), Some("0"), "{report42}");

    // Nothing we sent was rejected by QuickFIX's validation: the one rejection is the
    // deliberate QuoteRequest, which its application does not support. (Its line is
    // waited for: QuickFIX's output is read by another thread, which may not have
    // read it yet when our side already has the reject; CI's loaded run saw that.)
    qf.wait_ever(&["EVENT", Q44, "Rejected"]);
    qf.wait_ever(&["IN", "FIX.4.2:QF->TW", "|35=D|", "|11=ORD42|"]);
    let rejected = qf.find_all_since(0, &["Rejected"]);
    assert_eq!(rejected.len(), 1, "{}", qf.output());
    assert!(
        rejected[0].contains("Unsupported Message Type"),
        "{}",
        qf.output()
    );

    tw.send("logout");
    tw.wait_ever(&["LOGOUT", S44]);
    tw.wait_ever(&["LOGOUT", S42]);
    qf.wait_ever(&["EVENT", Q44, "Received logout request"]);
    assert!(tw.terminate().success(), "{}", tw.output());
}

/// Orders typed while QuickFIX is down are stored and recovered by QuickFIX's
/// ResendRequest after it comes back (PossDupFlag=Y); a restart of tickwire with its
/// file store continues the sequence numbers without a gap on either side.
#[test]
fn our_initiator_gap_is_repaired_by_resend_and_the_file_store_continues_after_restart() {
    let (run, mut qf, mut tw) = initiator_against_quickfix("interop-gap", false);
    tw.send(&format!("35=D|11=ORD1|{ORDER}"));
    tw.wait(&["IN", S44, "|35=8|", "|11=ORD1|"]);

    // QuickFIX goes away (it logs out on SIGTERM).
    assert!(qf.terminate().success(), "{}", qf.output());
    tw.wait(&["LOGOUT", S44]);
    // Not logged on: stored with their numbers, and the CLI says they were not sent.
    tw.send(&format!("35=D|11=ORD2|{ORDER}"));
    let stored2 = tw.wait(&["STORED", S44, "not sent"]);
    tw.send(&format!("35=D|11=ORD3|{ORDER}"));
    tw.wait(&["STORED", S44]);

    // Back with its store: our Logon's number is too high for it, it asks for the gap.
    let mut qf = quickfix(
        "quickfix acceptor (restarted)",
        "interop-acceptor.cfg",
        run.port,
        &run.dir.path().join("qf"),
    );
    qf.wait(&["EVENT", Q44, "MsgSeqNum too high"]);
    let rr = qf.wait(&["OUT", Q44, "|35=2|"]);
    let begin: u64 = field(&rr, 7).unwrap().parse().unwrap();
    let want: u64 = stored2
        .split(' ')
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no MsgSeqNum in {stored2:?}"));
    // Our reconnection attempts while QuickFIX was shutting down may have used
    // numbers (refused Logons) before ORD2: those come back as a gap fill.
    assert!(
        begin <= want,
        "ResendRequest should cover ORD2's number {want}: {rr}"
    );
    let resent = qf.wait(&["IN", Q44, "|35=D|", "|11=ORD2|"]);
    assert_eq!(field(&resent, 43).as_deref(), Some("Y"), "{resent}");
    assert!(
        field(&resent, 122).is_some(),
        "OrigSendingTime missing: {resent}"
    );
    qf.wait(&["IN", Q44, "|35=D|", "|11=ORD3|"]);
    tw.wait(&["IN", S44, "|35=8|", "|11=ORD2|"]);
    tw.wait(&["IN", S44, "|35=8|", "|11=ORD3|"]);

    // Restart tickwire: the file store continues both sequences.
    tw.send("logout");
    tw.wait(&["LOGOUT", S44]);
    let last_out = tw
        .last_ever(&["OUT", S44, "|35=5|"])
        .unwrap_or_else(|| panic!("no Logout sent:\n{}", tw.output()));
    assert!(tw.terminate().success());
    let mut tw = Peer::tickwire(
        "tickwire initiator (restarted)",
        "initiator",
        &run.cfg,
        "log",
    );
    let logon = tw.wait(&["OUT", S44, "|35=A|"]);
    assert_eq!(seq(&logon), seq(&last_out) + 1, "{logon} after {last_out}");
    tw.wait(&["LOGON", S44]);
    tw.send(&format!("35=D|11=ORD4|{ORDER}"));
    tw.wait(&["IN", S44, "|35=8|", "|11=ORD4|"]);
    let qf_lines = qf.output();
    let gaps = qf_lines.matches("MsgSeqNum too high").count();
    assert_eq!(gaps, 1, "only the deliberate gap:\n{qf_lines}");
    assert!(!qf_lines.contains("MsgSeqNum too low"), "{qf_lines}");
    assert!(!tw.ever(&["MsgSeqNum too"]), "{}", tw.output());
}

/// ResetOnLogon: a restarted initiator logs on with 141=Y and MsgSeqNum 1, QuickFIX
/// resets too, and the session goes on from 1.
#[test]
fn our_initiator_reset_on_logon_resets_quickfix_to_one() {
    let (run, mut qf, mut tw) = initiator_against_quickfix("interop-reset", false);
    tw.send(&format!("35=D|11=ORD1|{ORDER}"));
    tw.wait(&["IN", S44, "|35=8|", "|11=ORD1|"]);
    tw.send("logout");
    tw.wait(&["LOGOUT", S44]);
    assert!(tw.terminate().success());

    let cfg = initiator_cfg(run.dir.path(), run.port, false, "ResetOnLogon=Y");
    let mut tw = Peer::tickwire("tickwire initiator (reset)", "initiator", &cfg, "log");
    let logon = tw.wait(&["OUT", S44, "|35=A|"]);
    assert_eq!(seq(&logon), 1, "{logon}");
    assert_eq!(field(&logon, 141).as_deref(), Some("Y"), "{logon}");
    qf.wait(&["EVENT", Q44, "ResetSeqNumFlag"]);
    let answer = tw.wait(&["IN", S44, "|35=A|"]);
    assert_eq!(seq(&answer), 1, "{answer}");
    assert_eq!(field(&answer, 141).as_deref(), Some("Y"), "{answer}");
    tw.wait(&["LOGON", S44]);
    tw.send(&format!("35=D|11=ORD2|{ORDER}"));
    let sent = tw.wait(&["OUT", S44, "|35=D|", "|11=ORD2|"]);
    assert_eq!(seq(&sent), 2, "{sent}");
    let report = tw.wait(&["IN", S44, "|35=8|", "|11=ORD2|"]);
    assert_eq!(seq(&report), 2, "{report}");
    assert!(tw.terminate().success());
}

/// QuickFIX's initiator against our acceptor: logon, application messages both ways,
/// an order stored while QuickFIX is away recovered by its ResendRequest, and a
/// restart of our acceptor continuing the sequence from its file store.
#[test]
fn quickfix_initiator_with_our_acceptor_logon_messages_resend_and_restart() {
    let dir = temp_dir("interop-acceptor");
    let port = free_port();
    let qf_dir = dir.path().join("qf");
    let cfg = acceptor_cfg(dir.path(), port);
    let mut tw = Peer::tickwire("tickwire acceptor", "acceptor", &cfg, "log");
    tw.wait(&["READY acceptor"]);
    let mut qf = quickfix("quickfix initiator", "interop-initiator.cfg", port, &qf_dir);
    tw.wait(&["LOGON", S44]);
    qf.wait(&["EVENT", Q44, "Received logon response"]);

    tw.send(&format!("35=D|11=A1|{ORDER}"));
    tw.wait(&["IN", S44, "|35=8|", "|11=A1|"]);
    qf.wait(&["IN", Q44, "|35=D|", "|11=A1|"]);
    tw.send("35=C|164=T2|94=0|147=subject|33=1|58=text");
    let email = tw.wait(&["IN", S44, "|35=C|"]);
    assert_eq!(field(&email, 147).as_deref(), Some("subject"), "{email}");

    // QuickFIX leaves; an order typed meanwhile waits in our store.
    assert!(qf.terminate().success(), "{}", qf.output());
    tw.wait(&["LOGOUT", S44]);
    tw.send(&format!("35=D|11=A2|{ORDER}"));
    tw.wait(&["STORED", S44, "not sent"]);
    let mut qf = quickfix(
        "quickfix initiator (restarted)",
        "interop-initiator.cfg",
        port,
        &qf_dir,
    );
    let qf_logon = qf.wait(&["OUT", Q44, "|35=A|"]);
    assert!(seq(&qf_logon) > 1, "QuickFIX's store continues: {qf_logon}");
    qf.wait(&["EVENT", Q44, "MsgSeqNum too high"]);
    let resent = qf.wait(&["IN", Q44, "|35=D|", "|11=A2|"]);
    assert_eq!(field(&resent, 43).as_deref(), Some("Y"), "{resent}");
    tw.wait(&["IN", S44, "|35=8|", "|11=A2|"]);

    // Restart our acceptor: QuickFIX reconnects, both stores continue.
    assert!(tw.terminate().success(), "{}", tw.output());
    // The last message before the restart (the Logout of the shutdown).
    let before = tw
        .last_ever(&["OUT", S44, "|35="])
        .unwrap_or_else(|| panic!("nothing sent:\n{}", tw.output()));
    let mut tw = Peer::tickwire("tickwire acceptor (restarted)", "acceptor", &cfg, "log");
    let logon = tw.wait(&["OUT", S44, "|35=A|"]);
    assert_eq!(seq(&logon), seq(&before) + 1, "{logon} after {before}");
    tw.wait(&["LOGON", S44]);
    tw.send(&format!("35=D|11=A3|{ORDER}"));
    tw.wait(&["IN", S44, "|35=8|", "|11=A3|"]);
    // QuickFIX's initiator sends (and numbers) a Logon on its timer even while it has
    // no connection, so it may arrive with a number above our stored one: that is a
    // gap it fills itself (SequenceReset-GapFill), never a number we reuse or lose.
    assert!(!tw.ever(&["MsgSeqNum too low"]), "{}", tw.output());
    assert!(!qf.ever(&["MsgSeqNum too low"]), "{}", qf.output());
    assert!(!qf.ever(&["Rejected"]), "{}", qf.output());
    assert!(qf.terminate().success());
}
