//! `tickwire fix`: two tickwire processes on 127.0.0.1, an acceptor running the `echo`
//! application and an initiator running `log`, exchanging orders typed on the
//! initiator's standard input; SIGTERM logs out; kill -9 of the acceptor loses no
//! sequence number it sent (store before socket). Also `--help` and a bad settings file.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod fix_support;

use common::assert_help_lists;
use fix_support::{field, free_port, temp_dir, two_sided_cfg, Peer, BIN};

const ORDER: &str = "38=100|40=1|54=1|55=IBM|60=20240101-00:00:00";

/// An order typed before the session is logged on is stored, not sent, and the CLI
/// says so (STORED with its MsgSeqNum), where it used to say SENT.
#[test]
fn an_order_typed_before_the_logon_is_reported_stored_not_sent() {
    let dir = temp_dir("cli-early");
    let port = free_port();
    let cfg = two_sided_cfg(dir.path(), port, true);
    // No acceptor: the initiator cannot log on.
    let mut client = Peer::tickwire("tickwire initiator", "initiator", &cfg, "log");
    client.wait(&["READY initiator"]);
    let c = "FIX.4.4:CLIENT->VENUE";
    client.send(&format!("35=D|11=EARLY|{ORDER}"));
    let line = client.wait(&["STORED", c, "not logged on"]);
    assert!(line.contains("not sent"), "{line}");
    assert_eq!(client.count_ever(&["SENT"]), 0, "{}", client.output());
    assert_eq!(
        client.count_ever(&["OUT", c, "|35=D|"]),
        0,
        "{}",
        client.output()
    );
}

#[test]
fn echo_acceptor_and_initiator_exchange_orders_and_ignore_a_poss_resend_duplicate() {
    let dir = temp_dir("cli-echo");
    let port = free_port();
    let cfg = two_sided_cfg(dir.path(), port, true);
    let mut venue = Peer::tickwire("tickwire acceptor", "acceptor", &cfg, "echo");
    let ready = venue.wait(&["READY acceptor"]);
    assert!(ready.ends_with(&format!("127.0.0.1:{port}")), "{ready}");
    let mut client = Peer::tickwire("tickwire initiator", "initiator", &cfg, "log");
    let c = "FIX.4.4:CLIENT->VENUE";
    let v = "FIX.4.4:VENUE->CLIENT";
    client.wait(&["LOGON", c]);
    venue.wait(&["LOGON", v]);

    // An order comes back as the same message type and body.
    client.send(&format!("35=D|11=ORD1|{ORDER}"));
    let echoed = client.wait(&["IN", c, "|35=D|", "|11=ORD1|"]);
    for (tag, want) in [
        (38, "100"),
        (40, "1"),
        (54, "1"),
        (55, "IBM"),
        (60, "20240101-00:00:00"),
    ] {
        assert_eq!(
            field(&echoed, tag).as_deref(),
            Some(want),
            "{tag} in {echoed}"
        );
    }
    assert_eq!(field(&echoed, 49).as_deref(), Some("VENUE"), "{echoed}");

    // PossResend=Y with a ClOrdID already seen: ignored. A new ClOrdID: echoed.
    client.send(&format!("35=D|97=Y|11=ORD1|{ORDER}"));
    venue.wait(&["EVENT", v, "Ignoring PossResend NewOrderSingle ORD1"]);
    client.send(&format!("35=D|97=Y|11=ORD2|{ORDER}"));
    client.wait(&["IN", c, "|35=D|", "|11=ORD2|"]);
    // Counted over the whole output (the duplicate's echo, had there been one, came
    // before ORD2's, i.e. before the cursor): ORD1 was echoed once, for the original.
    assert_eq!(
        client.count_ever(&["IN", c, "|35=D|", "|11=ORD1|"]),
        1,
        "the PossResend duplicate was echoed:\n{}",
        client.output()
    );
    assert_eq!(
        venue.count_ever(&["OUT", v, "|35=D|", "|11=ORD1|"]),
        1,
        "{}",
        venue.output()
    );

    // Email and SecurityDefinition are echoed; anything else is unsupported.
    client.send("35=C|164=T1|94=0|147=subject|33=1|58=hello");
    let email = client.wait(&["IN", c, "|35=C|"]);
    assert_eq!(field(&email, 58).as_deref(), Some("hello"), "{email}");
    client.send("35=d|320=REQ1|322=RESP1|323=1|55=IBM");
    client.wait(&["IN", c, "|35=d|", "|320=REQ1|"]);
    client.send("35=R|131=Q1|146=1|55=IBM");
    let bmr = client.wait(&["IN", c, "|35=j|"]);
    assert_eq!(field(&bmr, 380).as_deref(), Some("3"), "{bmr}");
    assert_eq!(field(&bmr, 372).as_deref(), Some("R"), "{bmr}");

    client.send("logout");
    client.wait(&["LOGOUT", c]);
    venue.wait(&["LOGOUT", v]);
    assert!(client.terminate().success(), "{}", client.output());
    assert!(venue.terminate().success(), "{}", venue.output());

    // The message log of both sides (one file per session).
    let log = std::fs::read_to_string(
        dir.path()
            .join("log/FIX.4.4-VENUE-CLIENT.messages.current.log"),
    )
    .unwrap();
    assert!(log.contains("\x0111=ORD2\x01"), "{log}");
}

#[test]
fn help_teaches_and_a_bad_settings_file_is_reported_with_its_line() {
    assert_help_lists(
        &["fix", "acceptor", "--help"],
        &[
            "--config",
            "--app",
            "[SESSION]",
            "SocketAcceptPort",
            "echo",
            "PossResend",
        ],
    );
    // New-user pass: the sample's `# DataDictionary=FIX44.xml   # QuickFIX's; ...`,
    // uncommented, kept the trailing comment in the file name (a comment takes a whole
    // line in the format). No sample line carries one after its value.
    let (st, help, _) = run(&["fix", "acceptor", "--help"]);
    assert!(st.success());
    for line in help
        .lines()
        .filter(|l| l.contains('=') && l.trim_start().starts_with('#'))
    {
        let setting = line.trim_start().trim_start_matches('#');
        assert!(
            !setting.contains('#'),
            "a comment after a sample value: {line}"
        );
    }
    let dir = temp_dir("cli-bad");
    let cfg = dir.path().join("bad.cfg");
    std::fs::write(
        &cfg,
        "[DEFAULT]\nConnectionType=acceptor\nHeartBtInterval=30\n\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID=A\nTargetCompID=B\nSocketAcceptPort=1\n",
    )
    .unwrap();
    let (st, _, err) = run(&["fix", "acceptor", "--config", cfg.to_str().unwrap()]);
    assert!(!st.success());
    assert!(err.contains("bad.cfg:3"), "{err}");
    assert!(err.contains("HeartBtInt"), "suggestion missing: {err}");
    // No session of the requested side.
    let (st, _, err) = run(&["fix", "initiator", "--config", cfg.to_str().unwrap()]);
    assert!(!st.success());
    assert!(err.contains("error"), "{err}");
    // Regression: a malformed first line was ignored (a later error, if any, named
    // another line). It is an error naming the file and line, as other bad lines are.
    let first = dir.path().join("first.cfg");
    std::fs::write(
        &first,
        "[DEFAULT\nConnectionType=acceptor\n\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID=A\nTargetCompID=B\nSocketAcceptPort=1\n",
    )
    .unwrap();
    let (st, _, err) = run(&["fix", "acceptor", "--config", first.to_str().unwrap()]);
    assert!(!st.success());
    assert!(
        err.contains("first.cfg:1: a section header without its closing ']': [DEFAULT"),
        "{err}"
    );
    // Regression: a port out of range said "expected an integer in range" without
    // the range.
    let port = dir.path().join("port.cfg");
    std::fs::write(
        &port,
        "[DEFAULT]\nConnectionType=initiator\nNonStopSession=Y\nHeartBtInt=30\n\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID=A\nTargetCompID=B\n\
         SocketConnectHost=127.0.0.1\nSocketConnectPort=99999\n",
    )
    .unwrap();
    let (st, _, err) = run(&["fix", "initiator", "--config", port.to_str().unwrap()]);
    assert!(!st.success());
    assert!(
        err.contains(
            "port.cfg:10: invalid value '99999' for SocketConnectPort: expected an integer in \
             1..=65535"
        ),
        "{err}"
    );
}

/// A second acceptor started by mistake on the same settings (same `FileStorePath`
/// and session) is refused before it touches the running one's store: it used to
/// recover the store, fail to bind the port, and cut the running acceptor's log on its
/// way out, so that the next restart refused the store as truncated.
#[test]
fn a_second_acceptor_on_the_same_store_is_refused_and_the_first_goes_on() {
    let dir = temp_dir("cli-twice");
    let port = free_port();
    let cfg = two_sided_cfg(dir.path(), port, false);
    let mut venue = Peer::tickwire("tickwire acceptor", "acceptor", &cfg, "echo");
    venue.wait(&["READY acceptor"]);
    let mut client = Peer::tickwire("tickwire initiator", "initiator", &cfg, "log");
    let c = "FIX.4.4:CLIENT->VENUE";
    client.wait(&["LOGON", c]);
    client.send(&format!("35=D|11=TWICE1|{ORDER}"));
    client.wait(&["IN", c, "|11=TWICE1|"]);
    let log = dir.path().join("store/FIX.4.4-VENUE-CLIENT/store.log");
    let size = std::fs::metadata(&log).unwrap().len();
    let (st, _, err) = run(&["fix", "acceptor", "--config", cfg.to_str().unwrap()]);
    assert!(!st.success());
    assert!(err.contains("in use by another open store"), "{err}");
    assert_eq!(std::fs::metadata(&log).unwrap().len(), size);
    // The first acceptor carries on: the next order is echoed, numbered after the
    // first.
    client.send(&format!("35=D|11=TWICE2|{ORDER}"));
    let echoed = client.wait(&["IN", c, "|11=TWICE2|"]);
    let first = client.wait_ever(&["IN", c, "|11=TWICE1|"]);
    let seq = |l: &str| field(l, 34).unwrap().parse::<u64>().unwrap();
    assert_eq!(seq(&echoed), seq(&first) + 1, "{echoed}");
}

fn run(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let mut p = std::process::Command::new(BIN);
    p.args(args).stdin(std::process::Stdio::null());
    let out = p.output().expect("running tickwire");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The settings of [`two_sided_cfg`] in a fresh directory `name`, with the acceptor
/// (`echo`) ready and the initiator (`log`) started; returns the directory's guard
/// (bind it before the peers, so they exit before it is removed) and the settings path.
fn start_two_sided(name: &str) -> (tempfile::TempDir, std::path::PathBuf, Peer, Peer) {
    let dir = temp_dir(name);
    let port = free_port();
    let cfg = two_sided_cfg(dir.path(), port, false);
    let mut venue = Peer::tickwire("tickwire acceptor", "acceptor", &cfg, "echo");
    venue.wait(&["READY acceptor"]);
    let client = Peer::tickwire("tickwire initiator", "initiator", &cfg, "log");
    (dir, cfg, venue, client)
}

/// Issue 22: SIGTERM of the real `tickwire fix acceptor` logs the session out (the
/// counterparty receives a Logout) and the process exits successfully.
#[test]
fn sigterm_logs_the_acceptor_out_before_it_exits() {
    let (_dir, _, mut venue, mut client) = start_two_sided("cli-sigterm");
    let c = "FIX.4.4:CLIENT->VENUE";
    let v = "FIX.4.4:VENUE->CLIENT";
    client.wait(&["LOGON", c]);
    venue.wait(&["LOGON", v]);
    let status = venue.terminate();
    assert!(status.success(), "{status:?}\n{}", venue.output());
    assert!(venue.ever(&["OUT", v, "|35=5|"]), "{}", venue.output());
    let logout = client.wait(&["IN", c, "|35=5|"]);
    assert_eq!(field(&logout, 49).as_deref(), Some("VENUE"), "{logout}");
    client.wait(&["LOGOUT", c]);
    assert!(client.terminate().success(), "{}", client.output());
}

/// Issue 22: the store is flushed before the socket is written, so `kill -9` of the
/// acceptor never loses a sequence number it sent: after a restart from the same
/// FileStorePath its next message (the Logon answer) continues after the last one the
/// initiator received, and the initiator sees no "MsgSeqNum too low".
#[test]
fn kill_9_of_the_acceptor_loses_no_sequence_number_it_sent() {
    let (_dir, cfg, mut venue, mut client) = start_two_sided("cli-kill9");
    let c = "FIX.4.4:CLIENT->VENUE";
    client.wait(&["LOGON", c]);
    for i in 0..20 {
        client.send(&format!("35=D|11=K{i}|{ORDER}"));
    }
    client.wait(&["IN", c, "|35=D|", "|11=K19|"]);
    let last_in = |p: &Peer| -> u64 {
        p.output()
            .lines()
            .filter(|l| l.starts_with("IN ") && l.contains(c))
            .filter_map(|l| field(l, 34))
            .filter_map(|s| s.parse::<u64>().ok())
            .max()
            .unwrap_or(0)
    };
    let before = last_in(&client);
    assert!(
        before >= 21,
        "Logon + 20 echoes: {before}\n{}",
        client.output()
    );
    venue.kill_9();
    let mut venue = Peer::tickwire("tickwire acceptor again", "acceptor", &cfg, "echo");
    venue.wait(&["READY acceptor"]);
    // The initiator reconnects (ReconnectInterval=1) and logs on again.
    let logon = client.wait(&["IN", c, "|35=A|"]);
    let seq: u64 = field(&logon, 34).unwrap().parse().unwrap();
    assert!(
        seq > before,
        "the restarted acceptor reused sequence number {seq} (last received {before})"
    );
    client.wait(&["LOGON", c]);
    assert!(!client.ever(&["MsgSeqNum too low"]), "{}", client.output());
    assert!(client.terminate().success(), "{}", client.output());
    assert!(venue.terminate().success(), "{}", venue.output());
}

/// A malformed message typed on standard input is refused with `ERROR <session>
/// <text>` naming the field, and nothing goes out: the next good message gets the
/// next sequence number and is the only application message the acceptor receives
/// (these lines used to go on the wire, each costing a number, a reject or a resend).
#[test]
fn a_malformed_typed_message_is_refused_and_uses_no_sequence_number() {
    let dir = temp_dir("cli-malformed");
    let port = free_port();
    let cfg = two_sided_cfg(dir.path(), port, false);
    let mut venue = Peer::tickwire("tickwire acceptor", "acceptor", &cfg, "log");
    venue.wait(&["READY acceptor"]);
    let mut client = Peer::tickwire("tickwire initiator", "initiator", &cfg, "log");
    let c = "FIX.4.4:CLIENT->VENUE";
    let v = "FIX.4.4:VENUE->CLIENT";
    client.wait(&["LOGON", c]);
    venue.wait(&["LOGON", v]);
    let logon = client.last_ever(&["OUT", c, "|35=A|"]).unwrap();
    let next: u64 = field(&logon, 34).unwrap().parse::<u64>().unwrap() + 1;

    for (line, error) in [
        ("35=D|bogus", "field 2 \"bogus\" has no '='"),
        (
            "35=D|11=B|10=000",
            "field 3 \"10=000\": CheckSum (10) is computed by the session",
        ),
        ("35=|11=X", "field 1 \"35=\": MsgType (35) is empty"),
        (
            "35=D|11=D|34=999",
            "field 3 \"34=999\": MsgSeqNum (34) is assigned by the session",
        ),
    ] {
        client.send(line);
        let refused = client.wait(&["ERROR", c]);
        assert!(
            refused.starts_with(&format!("ERROR {c} {error}")),
            "{line}: {refused}"
        );
    }
    client.send(&format!("35=D|11=GOOD|{ORDER}"));
    let sent = client.wait(&["SENT", c]);
    assert_eq!(sent, format!("SENT {c} {next}"), "{}", client.output());
    let got = venue.wait(&["IN", v, "|35=D|"]);
    assert_eq!(field(&got, 11).as_deref(), Some("GOOD"), "{got}");
    assert_eq!(
        field(&got, 34),
        Some(next.to_string()),
        "{got}\n{}",
        venue.output()
    );
    // Only the good message went out and arrived: no other application message, no
    // Reject, no ResendRequest, nothing the acceptor could not parse. (The OUT line may
    // be printed after SENT and after the acceptor read the message: wait for it.)
    client.wait(&["OUT", c, "|35=D|"]);
    assert_eq!(
        client.count_ever(&["OUT", c, "|35=D|"]),
        1,
        "{}",
        client.output()
    );
    assert_eq!(
        venue.count_ever(&["IN", v, "|35=D|"]),
        1,
        "{}",
        venue.output()
    );
    let types: Vec<String> = venue
        .output()
        .lines()
        .filter(|l| l.starts_with(&format!("IN {v} ")))
        .filter_map(|l| field(l, 35))
        .filter(|t| t != "0")
        .collect();
    assert_eq!(types, ["A", "D"], "{}", venue.output());
    for p in [&client, &venue] {
        for bad in ["|35=3|", "|35=2|", "Invalid message", "BodyLength"] {
            assert!(!p.ever(&[bad]), "{bad}:\n{}", p.output());
        }
    }
    assert!(client.terminate().success(), "{}", client.output());
    assert!(venue.terminate().success(), "{}", venue.output());
}

/// Regression (new-user pass): docs/fix.md promises `ERROR <session> <text>` for a line
/// typed on standard input that is refused, but an unknown session or command came out
/// on standard error as `error: no session ...`, an administrative MsgType did not name
/// the field, and a line that was not UTF-8 ended the reading of standard input in
/// silence. Every refusal is now an `ERROR` line on standard output naming the session
/// and the reason, and the next line is read.
#[test]
fn regression_every_refused_stdin_line_is_an_error_line_on_standard_output() {
    let dir = temp_dir("cli-stdin-errors");
    let port = free_port();
    let cfg = two_sided_cfg(dir.path(), port, false);
    // No acceptor: nothing here needs a logon.
    let mut client = Peer::tickwire("tickwire initiator", "initiator", &cfg, "log");
    client.wait(&["READY initiator"]);
    let c = "FIX.4.4:CLIENT->VENUE";
    let nobody = "FIX.4.4:NOBODY->VENUE";
    let cases: [(Vec<u8>, String); 6] = [
        (
            b"bogus\n".to_vec(),
            format!(
                "ERROR {c} \"bogus\" is not a command (logout, logon, quit), a message \
                 (35=<MsgType>|tag=value|...) or a session name (sessions: {c})"
            ),
        ),
        (
            format!("{nobody} 35=D|11=X|{ORDER}\n").into_bytes(),
            format!(
                "ERROR {nobody} no such session (sessions: {c}); a message is \
                 35=<MsgType>|... or <session> 35=<MsgType>|..."
            ),
        ),
        (
            format!("logout {nobody}\n").into_bytes(),
            format!("ERROR {nobody} no such session (sessions: {c})"),
        ),
        (
            format!("logon {nobody}\n").into_bytes(),
            format!("ERROR {nobody} no such session (sessions: {c})"),
        ),
        (
            b"35=A|98=0|108=30\n".to_vec(),
            format!(
                "ERROR {c} field 1 \"35=A\": MsgType (35) \"A\" is an administrative message, \
                 which the session sends itself (the logout and logon commands ask it to)"
            ),
        ),
        (
            b"35=D|11=X|58=caf\xe9\n".to_vec(),
            format!("ERROR {c} the line is not UTF-8 text (byte 17, 0xE9): nothing sent"),
        ),
    ];
    for (line, want) in &cases {
        client.send_bytes(line);
        let got = client.wait(&["ERROR"]);
        assert_eq!(
            &got,
            want,
            "{}\n{}",
            String::from_utf8_lossy(line),
            client.output()
        );
    }
    // Standard input is still read, and nothing above was stored or sent.
    client.send(&format!("35=D|11=AFTER|{ORDER}"));
    let stored = client.wait(&["STORED", c]);
    assert!(!client.ever(&["stderr: "]), "{}", client.output());
    assert_eq!(client.count_ever(&["|35=D|"]), 0, "{}", client.output());
    // That stored order never went out: the exit says so.
    let st = client.terminate();
    assert_eq!(st.code(), Some(3), "{}", client.output());
    let seq = stored.split(' ').nth(2).unwrap();
    client.wait_ever(&["WARNING", c, &format!("(MsgSeqNum {seq})")]);
}

/// New-user pass: lines given at once (a script) were answered out of order: the
/// ERROR of a later line came before the SENT (or STORED) of an earlier one. The
/// answers now come in the order of the lines.
#[test]
fn refusals_and_sends_are_answered_in_input_order() {
    let dir = temp_dir("cli-stdin-order");
    let port = free_port();
    let cfg = two_sided_cfg(dir.path(), port, false);
    // No acceptor: the orders are stored (STORED), the bad lines refused (ERROR).
    let mut client = Peer::tickwire("tickwire initiator", "initiator", &cfg, "log");
    client.wait(&["READY initiator"]);
    let batch = format!(
        "35=D|11=ONE|{ORDER}\nbogus\n35=D|11=TWO|{ORDER}\nFIX.4.4:X->Y 35=D|11=3\n\
         35=D|11=THREE|{ORDER}\n35=0\n"
    );
    client.send_bytes(batch.as_bytes());
    client.wait(&["ERROR", "35=0"]);
    let answers: Vec<String> = client
        .output()
        .lines()
        .filter_map(|l| l.split(' ').next())
        .filter(|w| *w == "STORED" || *w == "ERROR")
        .map(str::to_owned)
        .collect();
    assert_eq!(
        answers,
        ["STORED", "ERROR", "STORED", "ERROR", "STORED", "ERROR"],
        "{}",
        client.output()
    );
    let st = client.terminate();
    assert_eq!(st.code(), Some(3), "{}", client.output());
}

/// New-user pass: an order typed while the session was not logged on is stored, not
/// sent; a `quit` before the counterparty asked for it lost the order while the
/// initiator exited 0 without a word. Now it exits 3 with a WARNING naming the number.
/// Asked for (the next Logon shows the counterparty the gap) and resent, the exit is
/// clean.
#[test]
fn quitting_with_a_stored_order_never_sent_warns_and_exits_3() {
    let (_dir, cfg, mut venue, mut client) = start_two_sided("cli-quit-stored");
    let c = "FIX.4.4:CLIENT->VENUE";
    client.wait(&["LOGON", c]);
    client.send("logout");
    client.wait(&["LOGOUT", c]);
    client.send(&format!("35=D|11=EARLY|{ORDER}"));
    let stored = client.wait(&["STORED", c]);
    let seq = stored.split(' ').nth(2).unwrap().to_owned();
    client.send("quit");
    let st = client.wait_exit();
    assert_eq!(st.code(), Some(3), "{}", client.output());
    let warning = client.wait_ever(&["WARNING", c]);
    assert!(
        warning.contains(&format!(
            "1 typed message(s) stored and never sent (MsgSeqNum {seq})"
        )),
        "{warning}"
    );
    assert_eq!(venue.count_ever(&["|11=EARLY|"]), 0, "{}", venue.output());
    drop(client);

    // Stored while logged out, then asked for after the next Logon and resent.
    let mut client = Peer::tickwire("tickwire initiator", "initiator", &cfg, "log");
    client.wait(&["LOGON", c]);
    client.wait(&["OUT", c, "|35=D|", "|11=EARLY|"]);
    client.send("logout");
    client.wait(&["LOGOUT", c]);
    client.send(&format!("35=D|11=LATE|{ORDER}"));
    client.wait(&["STORED", c]);
    client.send("logon");
    let resent = client.wait(&["OUT", c, "|35=D|", "|11=LATE|"]);
    assert!(resent.contains("|43=Y|"), "{resent}");
    venue.wait(&["IN", "|11=LATE|"]);
    client.send("quit");
    let st = client.wait_exit();
    assert!(st.success(), "{}", client.output());
    assert!(!client.ever(&["WARNING"]), "{}", client.output());
    assert!(venue.terminate().success(), "{}", venue.output());
}

/// A hostile-input pass: a Logon for no configured session was logged as "Session not
/// found for incoming message: connection closed", without the peer, ~100 lines a
/// second. It now names the peer and the session asked for, once a second at most
/// with a count.
#[test]
fn a_logon_for_no_session_is_logged_with_its_peer_and_the_session_asked_for() {
    use std::io::{Read, Write};
    let dir = temp_dir("cli-no-session");
    let port = free_port();
    let cfg = two_sided_cfg(dir.path(), port, false);
    let mut venue = Peer::tickwire("tickwire acceptor", "acceptor", &cfg, "echo");
    venue.wait(&["READY acceptor"]);
    let body =
        "35=A\x0149=NOBODY\x0156=VENUE\x0134=1\x0152=20240101-00:00:00.000\x0198=0\x01108=30\x01";
    let head = format!("8=FIX.4.4\x019={}\x01", body.len());
    let sum = (head.bytes().chain(body.bytes()).map(u32::from).sum::<u32>()) % 256;
    let logon = format!("{head}{body}10={sum:03}\x01");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    s.write_all(logon.as_bytes()).unwrap();
    let mut rest = Vec::new();
    // Closed without a word (QuickFIX does the same): end of stream, not a timeout.
    let read = s.read_to_end(&mut rest);
    assert!(read.is_ok() && rest.is_empty(), "{read:?} {rest:?}");
    let line = venue.wait(&[
        "connection from 127.0.0.1 closed",
        "Session not found for incoming message (a Logon for FIX.4.4 NOBODY->VENUE)",
    ]);
    assert!(
        line.contains("closed at their first message so far"),
        "{line}"
    );
    assert!(venue.terminate().success(), "{}", venue.output());
}
