//! `tickwire fix`: two tickwire processes on 127.0.0.1, an acceptor running the `echo`
//! application and an initiator running `log`, exchanging orders typed on the
//! initiator's standard input. Also `--help` and a bad settings file.

mod fix_support;

use fix_support::{field, free_port, temp_dir, Peer, BIN};

const ORDER: &str = "38=100|40=1|54=1|55=IBM|60=20240101-00:00:00";

#[test]
fn echo_acceptor_and_initiator_exchange_orders_and_ignore_a_poss_resend_duplicate() {
    let dir = temp_dir("cli-echo");
    let port = free_port();
    // One file for both sides: each command takes the sessions of its ConnectionType.
    let cfg = dir.join("fix.cfg");
    std::fs::write(
        &cfg,
        format!(
            "[DEFAULT]\nStartTime=00:00:00\nEndTime=00:00:00\nHeartBtInt=30\n\
             ReconnectInterval=1\nFileStorePath={0}/store\nFileLogPath={0}/log\n\n\
             [SESSION]\nConnectionType=acceptor\nBeginString=FIX.4.4\nSenderCompID=VENUE\n\
             TargetCompID=CLIENT\nSocketAcceptHost=127.0.0.1\nSocketAcceptPort={port}\n\n\
             [SESSION]\nConnectionType=initiator\nBeginString=FIX.4.4\nSenderCompID=CLIENT\n\
             TargetCompID=VENUE\nSocketConnectHost=127.0.0.1\nSocketConnectPort={port}\n",
            dir.display()
        ),
    )
    .unwrap();
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

    // PossResend=Y with a ClOrdID already seen: ignored. A new ClOrdID: echoed. The
    // venue answers in order, so an echo of the duplicate would come before ORD2's:
    // look from a mark taken before the duplicate was sent (the cursor moves past it).
    let before_dup = client.mark();
    client.send(&format!("35=D|97=Y|11=ORD1|{ORDER}"));
    venue.wait(&["EVENT", v, "Ignoring PossResend NewOrderSingle ORD1"]);
    client.send(&format!("35=D|97=Y|11=ORD2|{ORDER}"));
    client.wait(&["IN", c, "|35=D|", "|11=ORD2|"]);
    assert!(
        client
            .find_all_since(before_dup, &["IN", c, "|35=D|", "|11=ORD1|"])
            .is_empty(),
        "the PossResend duplicate was echoed:\n{}",
        client.output()
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
    let log =
        std::fs::read_to_string(dir.join("log/FIX.4.4-VENUE-CLIENT.messages.current.log")).unwrap();
    assert!(log.contains("\x0111=ORD2\x01"), "{log}");
}

#[test]
fn help_teaches_and_a_bad_settings_file_is_reported_with_its_line() {
    let (st, out, _) = run(&["fix", "acceptor", "--help"]);
    assert!(st.success());
    for needle in [
        "--config",
        "--app",
        "[SESSION]",
        "SocketAcceptPort",
        "echo",
        "PossResend",
    ] {
        assert!(out.contains(needle), "help lacks {needle}:\n{out}");
    }
    let dir = temp_dir("cli-bad");
    let cfg = dir.join("bad.cfg");
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
