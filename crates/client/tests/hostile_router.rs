//! The router's bytes are input like any other: a broken or hostile peer in the
//! router's place (a TCP listener on 127.0.0.1 that completes the handshake, then
//! sends what a real router never would) gets a protocol error and the client's CLOSE,
//! never a panic or a message built from bad bytes. The same listener also sends exact
//! byte sequences a real router sends only by chance of timing (a PING and a MESSAGE in
//! one read).

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tickwire_client::{Client, Error, ErrorCode, PublishOptions, Wait};
use tickwire_wire::frame::{self, Frame};

/// A MESSAGE on topic `zq` whose topic bytes are then replaced by `topic` (2 bytes).
fn message_with_topic(topic: [u8; 2]) -> Vec<u8> {
    let mut publish = Vec::new();
    frame::encode_publish(&mut publish, "zq", b"x", PublishOptions::default(), 1 << 20).unwrap();
    let at = publish.windows(2).position(|w| w == b"zq").unwrap();
    publish[at..at + 2].copy_from_slice(&topic);
    let mut out = Vec::new();
    frame::encode_message_from_publish(&mut out, &publish, 0, 0, 0);
    out
}

/// The next connection on `listener`, WELCOMEd as a router would. Reads are bounded:
/// a client that never closes fails the test instead of hanging it.
fn accept_welcomed(listener: &TcpListener) -> std::net::TcpStream {
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut welcome = Vec::new();
    frame::encode_welcome(&mut welcome, 1, 1 << 20, "broken");
    s.write_all(&welcome).unwrap();
    s
}

/// Plays the router: WELCOMEs the client, sends `bad` once told to (after the client's
/// handshake is over), then returns every byte the client sent until it closed.
fn broken_router(
    bad: Vec<u8>,
) -> (
    std::net::SocketAddr,
    mpsc::Sender<()>,
    thread::JoinHandle<Vec<u8>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (go, wait) = mpsc::channel();
    let peer = thread::spawn(move || {
        let mut s = accept_welcomed(&listener);
        wait.recv().unwrap();
        s.write_all(&bad).unwrap();
        let mut said = Vec::new();
        s.read_to_end(&mut said)
            .expect("the client never closed the connection");
        said
    });
    (addr, go, peer)
}

/// Every PONG token among the frames `said`.
fn pongs_of(said: &[u8]) -> Vec<u64> {
    let mut at = 0;
    let mut out = Vec::new();
    while let Ok(Some((f, n))) = frame::decode(&said[at..], 1 << 20) {
        if let Frame::Pong(token) = f {
            out.push(token);
        }
        at += n;
    }
    out
}

/// The CLOSE among the frames `said` (the client's HELLO comes first).
fn close_of(said: &[u8]) -> Option<(ErrorCode, String)> {
    let mut at = 0;
    while let Ok(Some((f, n))) = frame::decode(&said[at..], 1 << 20) {
        if let Frame::Close { code, reason } = f {
            return Some((code, reason.to_owned()));
        }
        at += n;
    }
    None
}

#[test]
fn recv_answers_a_ping_in_front_of_a_message_and_delivers_the_message() {
    let mut bytes = Vec::new();
    frame::encode_ping(&mut bytes, 7);
    bytes.extend_from_slice(&message_with_topic(*b"ok"));
    let (addr, go, peer) = broken_router(bytes);
    let mut c = Client::connect(addr).unwrap();
    go.send(()).unwrap();
    let m = c
        .recv(Wait::Timeout(Duration::from_secs(20)))
        .unwrap()
        .expect("the message after the PING");
    assert_eq!((m.topic(), m.payload()), ("ok", &b"x"[..]));
    // Dropped, not closed: this peer never answers a CLOSE.
    drop(c);
    let said = peer.join().unwrap();
    assert_eq!(pongs_of(&said), [7], "{said:?}");
}

/// `poll` reads a MESSAGE without flags in place and any other through the decoder:
/// a run of both kinds in one read, a ping between them, and a last message whose
/// topic is not UTF-8, are delivered in order with every field as sent, and the
/// broken one ends the connection (the plain reader hands a topic
/// it cannot read to the decoder, which refuses it).
#[test]
fn poll_delivers_plain_and_flagged_messages_in_order_from_one_read() {
    let mut bytes = Vec::new();
    let publish = |out: &mut Vec<u8>, topic: &str, payload: &[u8], discarded: u64| {
        let mut p = Vec::new();
        frame::encode_publish(&mut p, topic, payload, PublishOptions::default(), 1 << 20).unwrap();
        frame::encode_message_from_publish(out, &p, discarded, 0, 0);
    };
    publish(&mut bytes, "a/1", b"first", 0);
    publish(&mut bytes, "a/1", b"second", 3);
    publish(&mut bytes, "b/2", b"", 0);
    publish(&mut bytes, "a/1", &[7u8; 300], 0);
    frame::encode_ping(&mut bytes, 9);
    publish(&mut bytes, "a/1", b"last", 0);
    bytes.extend_from_slice(&message_with_topic([0xff, 0xfe]));
    let (addr, go, peer) = broken_router(bytes);
    let mut c = Client::connect(addr).unwrap();
    go.send(()).unwrap();
    let mut got: Vec<(String, Vec<u8>, u64)> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let err = loop {
        match c.poll(Wait::Timeout(Duration::from_millis(100)), |m| {
            got.push((m.topic().to_owned(), m.payload().to_vec(), m.discarded()))
        }) {
            Ok(_) => assert!(std::time::Instant::now() < deadline, "no error: {got:?}"),
            Err(e) => break e,
        }
    };
    // Reported after the messages before it: as the close it caused.
    assert!(
        matches!(&err, Error::Closed { code, reason }
            if *code == ErrorCode::MALFORMED_FRAME && reason.contains("not UTF-8")),
        "{err:?}"
    );
    let want: Vec<(String, Vec<u8>, u64)> = vec![
        ("a/1".into(), b"first".to_vec(), 0),
        ("a/1".into(), b"second".to_vec(), 3),
        ("b/2".into(), Vec::new(), 0),
        ("a/1".into(), vec![7u8; 300], 0),
        ("a/1".into(), b"last".to_vec(), 0),
    ];
    assert_eq!(got, want);
    let said = peer.join().unwrap();
    // (The PONG queued for the PING is dropped with the CLOSE that ends the
    // connection in the same read.)
    let (code, _) = close_of(&said).expect("a CLOSE");
    assert_eq!(code, ErrorCode::MALFORMED_FRAME);
}

#[test]
fn a_message_whose_topic_is_not_utf8_is_a_protocol_error_for_recv_and_poll() {
    for api in ["recv", "poll"] {
        let (addr, go, peer) = broken_router(message_with_topic([0xff, 0xfe]));
        let mut c = Client::connect(addr).unwrap();
        go.send(()).unwrap();
        let err = match api {
            "recv" => c
                .recv(Wait::Timeout(Duration::from_secs(20)))
                .map(|m| m.is_some()),
            _ => c
                .poll(Wait::Timeout(Duration::from_secs(20)), |_| {
                    panic!("a message with a broken topic was delivered")
                })
                .map(|n| n > 0),
        }
        .unwrap_err();
        assert!(
            matches!(&err, Error::Protocol(m) if m.contains("not UTF-8")),
            "{api}: {err:?}"
        );
        assert!(
            matches!(c.recv(Wait::NoWait), Err(Error::Closed { .. })),
            "{api}: the connection stays usable"
        );
        let said = peer.join().unwrap();
        let (code, reason) =
            close_of(&said).unwrap_or_else(|| panic!("{api}: no CLOSE in {said:?}"));
        assert_eq!(code, ErrorCode::MALFORMED_FRAME, "{api}: {reason}");
        assert!(reason.contains("not UTF-8"), "{api}: {reason}");
    }
}

#[test]
fn a_message_header_on_a_short_frame_is_a_protocol_error() {
    // A MESSAGE header whose length leaves no room for its fields (8: the header
    // alone), or is shorter than a header (6).
    for len in [8u32, 6] {
        let mut bad = len.to_le_bytes().to_vec();
        bad.extend_from_slice(&[frame::Kind::Message as u8, 0, 0, 0]);
        let (addr, go, peer) = broken_router(bad);
        let mut c = Client::connect(addr).unwrap();
        go.send(()).unwrap();
        let err = c
            .recv(Wait::Timeout(Duration::from_secs(20)))
            .map(|m| m.is_some())
            .unwrap_err();
        assert!(matches!(&err, Error::Protocol(_)), "length {len}: {err:?}");
        let said = peer.join().unwrap();
        let (code, reason) =
            close_of(&said).unwrap_or_else(|| panic!("length {len}: no CLOSE in {said:?}"));
        assert_eq!(code, ErrorCode::MALFORMED_FRAME, "length {len}: {reason}");
    }
}

/// Plays a router that WELCOMEs the client, then sends MESSAGE frames without end and
/// answers nothing (for at most 20 s, or until the client goes).
fn flooding_router(pings_first: bool) -> (std::net::SocketAddr, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut chunk = Vec::new();
        if pings_first {
            for i in 0..2000 {
                frame::encode_ping(&mut chunk, i);
            }
        } else {
            frame::encode_welcome(&mut chunk, 1, 1 << 20, "flood");
            s.write_all(&chunk).unwrap();
            chunk.clear();
            let one = message_with_topic(*b"ab");
            while chunk.len() < 64 << 10 {
                chunk.extend_from_slice(&one);
            }
        }
        let until = std::time::Instant::now() + Duration::from_secs(20);
        // Reads nothing: the client's PONGs fill its socket, which is its problem.
        while std::time::Instant::now() < until {
            if s.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    (addr, peer)
}

/// Hostile-input probe (a fake router): a router that keeps the socket readable never
/// let a read block, and the client looked at its deadlines only when one did, while
/// it kept every message that came meanwhile: `tickwire stats`, `request`, `sub --count`
/// hung past their timeouts at 3 GB and more. The deadline is now looked at after
/// every read, the messages kept while waiting are bounded, and closing drops them.
#[test]
fn a_router_that_sends_without_end_cannot_hold_a_call_or_a_close_past_its_timeout() {
    let (addr, peer) = flooding_router(false);
    let opts = tickwire_client::ClientOptions {
        request_timeout: Duration::from_millis(500),
        ..tickwire_client::ClientOptions::named("flooded")
    };
    let mut c = Client::connect_with(addr, opts).unwrap();
    let t0 = std::time::Instant::now();
    let e = c.stats_json().unwrap_err();
    // A MESSAGE to a connection that never subscribed is not kept for later: the
    // first one ends the call (before, the stash took up to 1 GiB of them).
    assert!(
        e.to_string()
            .contains("the router sent a MESSAGE, but this connection never subscribed"),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    drop(c);
    peer.join().unwrap();

    // A subscribed connection keeps what arrives while it waits, up to its bound.
    let (addr, peer) = flooding_router(false);
    let opts = tickwire_client::ClientOptions {
        request_timeout: Duration::from_millis(500),
        ..tickwire_client::ClientOptions::named("flooded")
    };
    let mut c = Client::connect_with(addr, opts).unwrap();
    let t0 = std::time::Instant::now();
    let e = c.subscribe("ab").unwrap_err();
    assert!(
        matches!(e, Error::Timeout { .. })
            || e.to_string()
                .contains("MiB of messages while this client waited"),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    drop(c);
    peer.join().unwrap();

    let (addr, peer) = flooding_router(false);
    let opts = tickwire_client::ClientOptions {
        request_timeout: Duration::from_millis(500),
        ..tickwire_client::ClientOptions::named("flooded")
    };
    let c = Client::connect_with(addr, opts).unwrap();
    let t0 = std::time::Instant::now();
    let _ = c.close();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    peer.join().unwrap();

    // PINGs without end before the WELCOME: the handshake's deadline holds.
    let (addr, peer) = flooding_router(true);
    let opts = tickwire_client::ClientOptions {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
        ..tickwire_client::ClientOptions::named("pinged")
    };
    let t0 = std::time::Instant::now();
    let e = Client::connect_with(addr, opts).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    peer.join().unwrap();
}

/// Hostile-input pass: a router that answers a cache query with cached messages
/// without end (and never the ACK) kept the client collecting them, its memory growing
/// with what the router sent: the answer is bounded as the stash is (1 GiB), then the
/// connection is given up with an error that says so.
#[test]
fn a_cache_query_answered_without_end_is_bounded() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let mut s = accept_welcomed(&listener);
        // The query's SUBSCRIBE first, then 1 MiB cached messages until the client goes
        // (at most 4 GiB, or 60 s).
        let mut head = [0u8; 5];
        s.read_exact(&mut head).unwrap();
        let mut publish = Vec::new();
        let payload = vec![7u8; (1 << 20) - 64];
        frame::encode_publish(
            &mut publish,
            "md/x",
            &payload,
            PublishOptions::default(),
            1 << 20,
        )
        .unwrap();
        let mut cached = Vec::new();
        frame::encode_cached_message(&mut cached, &publish, 1);
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(60);
        let mut sent = 0u64;
        while sent < 4 << 30 && std::time::Instant::now() < until {
            if s.write_all(&cached).is_err() {
                return sent;
            }
            sent += cached.len() as u64;
        }
        sent
    });
    let opts = tickwire_client::ClientOptions {
        request_timeout: Duration::from_secs(5),
        ..tickwire_client::ClientOptions::named("queried")
    };
    let mut c = Client::connect_with(addr, opts).unwrap();
    let e = c.cache_query("md/>").unwrap_err();
    assert!(
        e.to_string()
            .contains("answer to a cache query passed 1024 MiB"),
        "{e}"
    );
    // The connection is given up: the next call says so at once.
    assert!(c.ping().is_err());
    drop(c);
    let sent = peer.join().unwrap();
    assert!(
        (1 << 30..3 << 30).contains(&sent),
        "the router sent {sent} bytes before the client went"
    );
}

/// Plays a router that WELCOMEs the client and answers its PUB_OPEN with `window` and
/// `last_seq`; returns every byte the client sent until it closed.
fn opening_router(
    window: u32,
    last_seq: u64,
) -> (std::net::SocketAddr, thread::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let mut s = accept_welcomed(&listener);
        let mut said = Vec::new();
        let mut chunk = [0u8; 4096];
        // Up to the PUB_OPEN (after the HELLO), whose request id the answer carries.
        let request_id = loop {
            let n = s.read(&mut chunk).expect("no PUB_OPEN within 20 s");
            assert!(n > 0, "the client closed before its PUB_OPEN");
            said.extend_from_slice(&chunk[..n]);
            let mut at = 0;
            let mut found = None;
            while let Ok(Some((f, len))) = frame::decode(&said[at..], 1 << 20) {
                if let Frame::PubOpen { request_id, .. } = f {
                    found = Some(request_id);
                }
                at += len;
            }
            if let Some(id) = found {
                break id;
            }
        };
        let mut answer = Vec::new();
        tickwire_wire::gm::encode_pub_opened(&mut answer, request_id, window, last_seq);
        s.write_all(&answer).unwrap();
        s.read_to_end(&mut said)
            .expect("the client never closed the connection");
        said
    });
    (addr, peer)
}

#[test]
fn a_publisher_opened_with_no_window_or_no_sequence_number_left_is_a_protocol_error() {
    for (window, last_seq, says) in [
        (0, 0, "window of 0"),
        (1024, u64::MAX, "last sequence number"),
    ] {
        let (addr, peer) = opening_router(window, last_seq);
        let mut c = Client::connect(addr).unwrap();
        let err = c.open_publisher("gw", 0).unwrap_err();
        assert!(
            matches!(&err, Error::Protocol(m) if m.contains(says)),
            "window {window}, last_seq {last_seq}: {err:?}"
        );
        assert!(
            matches!(c.publish_guaranteed("t", b"x"), Err(Error::Closed { .. })),
            "window {window}: the connection stays usable"
        );
        let said = peer.join().unwrap();
        let (code, reason) =
            close_of(&said).unwrap_or_else(|| panic!("window {window}: no CLOSE in {said:?}"));
        assert_eq!(code, ErrorCode::MALFORMED_FRAME, "{reason}");
        assert!(reason.contains(says), "{reason}");
    }
}

/// New-user pass: `pub --guaranteed --give-up-after 2s` against a router that accepts
/// connections and never answers (stopped with SIGSTOP) gave up after 12.9 s: each
/// attempt waited its whole 5 s for the WELCOME. An attempt's handshake is now capped
/// at what is left of `give_up_after`.
#[test]
fn give_up_after_bounds_attempts_on_a_router_that_never_answers() {
    // Connections complete in the kernel's backlog; nothing ever accepts or answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let opts = tickwire_client::ReconnectOptions {
        give_up_after: Some(Duration::from_millis(1500)),
        ..tickwire_client::ReconnectOptions::local("silent", Duration::from_millis(1500))
    };
    assert_eq!(opts.client.connect_timeout, Duration::from_secs(5));
    let t0 = std::time::Instant::now();
    let e = match tickwire_client::GuaranteedPublisher::connect(&addr, "p", opts) {
        Ok(_) => panic!("a router that never answers opened a publisher"),
        Err(e) => e,
    };
    let took = t0.elapsed();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(
        took < Duration::from_millis(3500),
        "gave up after {took:?}: {e}"
    );
    drop(silent);
}

/// A router that answers the HELLO with `handshake` (MCAST_ROUTEs, then a WELCOME)
/// and holds the connection until the client closes it.
fn announcing_router(handshake: Vec<u8>) -> (std::net::SocketAddr, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(&handshake).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    (addr, peer)
}

fn route(out: &mut Vec<u8>, port: u16) {
    let group = std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(239, 1, 2, 3), port);
    tickwire_wire::mcast_route::encode_mcast_route(out, group, 7, 0, 0, ["md/>"]).unwrap();
}

/// Hostile-input pass: a client joined every route announced, the same one 64 times
/// (275 MiB before a datagram arrived), and routes a WELCOME did not grant MCAST for.
/// Both are protocol errors now.
#[test]
fn a_route_announced_twice_or_without_the_mcast_grant_is_a_protocol_error() {
    let connect = |addr: std::net::SocketAddr| {
        let opts = tickwire_client::ClientOptions {
            multicast: true,
            ..tickwire_client::ClientOptions::named("mc")
        };
        Client::connect_with(addr, opts)
    };
    let mut twice = Vec::new();
    route(&mut twice, 5000);
    route(&mut twice, 5000);
    frame::encode_welcome_caps(&mut twice, 1, 1 << 20, frame::caps::MCAST, "r");
    let (addr, peer) = announcing_router(twice);
    let Err(e) = connect(addr) else {
        panic!("accepted")
    };
    assert!(
        e.to_string()
            .contains("announced multicast stream 239.1.2.3:5000 twice"),
        "{e}"
    );
    peer.join().unwrap();

    let mut ungranted = Vec::new();
    route(&mut ungranted, 5000);
    frame::encode_welcome_caps(&mut ungranted, 1, 1 << 20, 0, "r");
    let (addr, peer) = announcing_router(ungranted);
    let Err(e) = connect(addr) else {
        panic!("accepted")
    };
    assert!(e.to_string().contains("without granting MCAST"), "{e}");
    peer.join().unwrap();

    // Two streams, granted: joined as before.
    let mut fine = Vec::new();
    route(&mut fine, 5000);
    route(&mut fine, 5001);
    frame::encode_welcome_caps(&mut fine, 1, 1 << 20, frame::caps::MCAST, "r");
    let (addr, peer) = announcing_router(fine);
    let c = connect(addr).unwrap();
    assert_eq!(c.multicast_routes().len(), 2);
    drop(c);
    peer.join().unwrap();
}

/// Review: a ReconnectingClient that never reconnects (`give_up_after` zero, as `pub
/// --no-reconnect`) answered Ok to the call that found its connection lost (a publish
/// was kept in the offline buffer for a reconnection that never comes; a flush said
/// all was written); only the next call failed. That call fails now, with the cause,
/// and nothing is kept.
#[test]
fn a_client_that_never_reconnects_fails_the_call_that_finds_the_loss() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let s = accept_welcomed(&listener);
        // The router goes away right after the handshake.
        drop(s);
    });
    let opts = tickwire_client::ReconnectOptions::local("once", Duration::ZERO);
    let mut c = tickwire_client::ReconnectingClient::connect(&addr.to_string(), opts).unwrap();
    peer.join().unwrap();
    let mut failed = None;
    for _ in 0..10_000 {
        if let Err(e) = c.publish("t/x", b"x") {
            failed = Some(("publish", e));
            break;
        }
        // The write that meets the closed socket is the flush's.
        if let Err(e) = c.flush() {
            failed = Some(("flush", e));
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    let (by, e) = failed.expect("the loss was never reported");
    // Before: that flush said Ok (kept for a reconnection) and the next call failed.
    assert_eq!(by, "flush", "{e}");
    assert!(!matches!(e, Error::OfflineBufferFull { .. }), "{e}");
    assert_eq!(
        c.offline_buffered(),
        (0, 0),
        "a publish was kept for a reconnection"
    );
    // Every later call fails too.
    assert!(c.publish("t/x", b"x").is_err());
}

/// Hostile-input pass: frames a connection never asked for (queue deliveries without
/// a BIND, publish answers without a PUB_OPEN, cached messages without an image) were
/// kept while the client waited for an answer, up to 1 GiB; now the first one is a
/// protocol error that says what came, and the client closes the connection.
#[test]
fn frames_the_connection_never_asked_for_are_a_protocol_error_while_it_waits() {
    let mut cached = Vec::new();
    let mut publish = Vec::new();
    frame::encode_publish(
        &mut publish,
        "md/x",
        b"p",
        PublishOptions::default(),
        1 << 20,
    )
    .unwrap();
    frame::encode_cached_message(&mut cached, &publish, 1);
    let mut ack = Vec::new();
    tickwire_wire::gm::encode_pub_ack(&mut ack, 1, 1);
    let mut bound = Vec::new();
    tickwire_wire::gm::encode_bound(&mut bound, 0, 1, true);
    for (bad, said) in [
        (
            cached,
            "a cached MESSAGE, but this connection never asked for an image",
        ),
        (
            ack,
            "a publish answer, but this connection never opened a publisher",
        ),
        (
            bound,
            "a queue delivery, but this connection never bound to a queue",
        ),
    ] {
        let (addr, go, peer) = broken_router(bad);
        let opts = tickwire_client::ClientOptions {
            request_timeout: Duration::from_secs(20),
            ..tickwire_client::ClientOptions::named("asked-nothing")
        };
        let mut c = Client::connect_with(addr, opts).unwrap();
        go.send(()).unwrap();
        let e = c.ping().unwrap_err();
        assert!(e.to_string().contains(said), "{said}: {e}");
        drop(c);
        let said_back = peer.join().unwrap();
        assert!(close_of(&said_back).is_some(), "{said}: no CLOSE");
    }
}
