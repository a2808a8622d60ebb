//! The client against a scripted fake router on loopback (one thread, raw frames).
//!
//! The real router is exercised by the workspace's cross-process tests; these pin the
//! client's side of the protocol: handshake, request / reply with messages arriving in
//! between, PING answers, closes, and errors. Timing is never asserted.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tickwire_client::{
    Client, ClientOptions, Error, ErrorCode, OwnedMessage, PublishOptions, Wait,
};
use tickwire_wire::frame::{self, decode, Frame, PROTOCOL_VERSION};

const MAX: u32 = 16 << 20;

/// The router's end of one connection.
struct Peer {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Peer {
    /// Reads one frame (blocking) and passes it to `f`; `None` at end of stream.
    fn try_frame<T>(&mut self, f: impl FnOnce(Frame<'_>) -> T) -> Option<T> {
        loop {
            if let Some((frame, n)) = decode(&self.buf, MAX).expect("client sent a bad frame") {
                let out = f(frame);
                self.buf.drain(..n);
                return Some(out);
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn frame<T>(&mut self, f: impl FnOnce(Frame<'_>) -> T) -> T {
        self.try_frame(f).expect("client closed the connection")
    }

    fn send(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        let mut out = Vec::new();
        encode(&mut out);
        self.s.write_all(&out).expect("write to client");
    }

    /// Expects HELLO, answers WELCOME; returns the client's name.
    fn welcome(&mut self, client_id: u32, max_frame: u32) -> String {
        let name = self.frame(|f| match f {
            Frame::Hello { version, name, .. } => {
                assert_eq!(version, PROTOCOL_VERSION);
                name.to_owned()
            }
            other => panic!("expected HELLO, got {other:?}"),
        });
        self.send(|o| frame::encode_welcome(o, client_id, max_frame, "fake"));
        name
    }

    /// Expects the client's CLOSE and answers with one.
    fn closing(&mut self) {
        self.frame(|f| {
            assert!(
                matches!(
                    f,
                    Frame::Close {
                        code: ErrorCode::NORMAL,
                        ..
                    }
                ),
                "{f:?}"
            )
        });
        self.send(|o| frame::encode_close(o, ErrorCode::NORMAL, "bye"));
    }

    /// Expects a SUBSCRIBE (or UNSUBSCRIBE when `unsub`) for `pattern`; returns its id.
    fn request(&mut self, unsub: bool, pattern: &str) -> u32 {
        self.frame(|f| match f {
            Frame::Subscribe {
                request_id,
                pattern: p,
            } if !unsub => {
                assert_eq!(p, pattern.as_bytes());
                request_id
            }
            Frame::Unsubscribe {
                request_id,
                pattern: p,
            } if unsub => {
                assert_eq!(p, pattern.as_bytes());
                request_id
            }
            other => panic!("expected a request for {pattern}, got {other:?}"),
        })
    }
}

/// Appends a MESSAGE as the router would deliver it.
fn message(out: &mut Vec<u8>, topic: &str, payload: &[u8], discarded: u64) {
    let mut p = Vec::new();
    frame::encode_publish(&mut p, topic, payload, PublishOptions::default(), MAX).unwrap();
    frame::encode_message_from_publish(out, &p, discarded, 0, 0);
}

fn fake_router(script: impl FnOnce(Peer) + Send + 'static) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        // Keeps a broken test from hanging forever.
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        script(Peer { s, buf: Vec::new() });
    });
    (addr, handle)
}

fn payloads(c: &mut Client, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    while got.len() < want {
        c.poll(Wait::Forever, |m| got.push(m.payload().to_vec()))
            .unwrap();
    }
    got
}

#[test]
fn handshake_reports_ids_and_close_is_orderly() {
    let (addr, router) = fake_router(|mut p| {
        assert_eq!(p.welcome(7, 4096), "probe");
        p.closing();
    });
    let opts = ClientOptions {
        name: "probe".into(),
        ..ClientOptions::default()
    };
    let c = Client::connect_with(addr, opts).unwrap();
    assert_eq!((c.client_id(), c.router_max_frame()), (7, 4096));
    c.close().unwrap();
    router.join().unwrap();
}

#[test]
fn messages_during_subscribe_are_kept_in_order_and_pings_answered() {
    let (addr, router) = fake_router(|mut p| {
        p.welcome(1, 4096);
        let id = p.request(false, "md/>");
        p.send(|o| {
            message(o, "md/a", b"1", 0);
            frame::encode_ping(o, 42);
            message(o, "md/b", b"2", 0);
            frame::encode_ack(o, id);
        });
        p.frame(|f| assert_eq!(f, Frame::Pong(42)));
        p.send(|o| message(o, "md/c", b"3", 0));
        // A PING while the client only polls is answered too.
        p.send(|o| frame::encode_ping(o, 43));
        p.frame(|f| assert_eq!(f, Frame::Pong(43)));
        p.send(|o| message(o, "md/d", b"4", 0));
        p.closing();
    });
    let mut c = Client::connect(addr).unwrap();
    c.subscribe("md/>").unwrap();
    let got = payloads(&mut c, 4);
    assert_eq!(got, [b"1", b"2", b"3", b"4"]);
    c.close().unwrap();
    router.join().unwrap();
}

#[test]
fn recv_delivers_the_stash_before_newer_messages() {
    let (addr, router) = fake_router(|mut p| {
        p.welcome(1, 4096);
        let id = p.request(false, "a");
        p.send(|o| {
            message(o, "a", b"early", 0);
            frame::encode_ack(o, id);
            message(o, "a", b"late", 0);
        });
        p.closing();
    });
    let mut c = Client::connect(addr).unwrap();
    c.subscribe("a").unwrap();
    let first = c.recv(Wait::Forever).unwrap().unwrap().into_owned();
    let second = c.recv(Wait::Forever).unwrap().unwrap().into_owned();
    assert_eq!(
        (&first.payload[..], &second.payload[..]),
        (&b"early"[..], &b"late"[..])
    );
    c.close().unwrap();
    router.join().unwrap();
}

#[test]
fn rejected_requests_leave_the_connection_usable() {
    let (addr, router) = fake_router(|mut p| {
        p.welcome(1, 4096);
        let id = p.request(true, "x");
        p.send(|o| frame::encode_error(o, id, ErrorCode::NOT_SUBSCRIBED, false, "not subscribed"));
        let id = p.request(false, "x/*");
        p.send(|o| frame::encode_ack(o, id));
        let id = p.frame(|f| match f {
            Frame::StatsRequest { request_id } => request_id,
            other => panic!("expected STATS_REQUEST, got {other:?}"),
        });
        p.send(|o| frame::encode_stats_reply(o, id, r#"{"clients":1}"#));
        let token = p.frame(|f| match f {
            Frame::Ping(t) => t,
            other => panic!("expected PING, got {other:?}"),
        });
        p.send(|o| frame::encode_pong(o, token));
        p.closing();
    });
    let mut c = Client::connect(addr).unwrap();
    // Invalid locally: never sent.
    assert!(matches!(c.subscribe("a//b"), Err(Error::InvalidPattern(_))));
    match c.unsubscribe("x") {
        Err(Error::Rejected { code, text }) => {
            assert_eq!(code, ErrorCode::NOT_SUBSCRIBED);
            assert_eq!(text, "not subscribed");
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    c.subscribe("x/*").unwrap();
    assert_eq!(c.stats_json().unwrap(), r#"{"clients":1}"#);
    c.ping().unwrap();
    c.close().unwrap();
    router.join().unwrap();
}

#[test]
fn late_ack_after_a_timeout_is_ignored() {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (addr, router) = fake_router(move |mut p| {
        p.welcome(1, 4096);
        let id = p.request(false, "slow");
        go_rx.recv().unwrap();
        p.send(|o| {
            frame::encode_ack(o, id);
            message(o, "slow", b"after", 0);
        });
        p.closing();
    });
    let opts = ClientOptions {
        request_timeout: Duration::from_millis(100),
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(addr, opts).unwrap();
    match c.subscribe("slow") {
        Err(Error::Timeout { what, .. }) => assert!(what.contains("ACK"), "{what}"),
        other => panic!("expected Timeout, got {other:?}"),
    }
    go_tx.send(()).unwrap();
    assert_eq!(payloads(&mut c, 1), [b"after"]);
    c.close().unwrap();
    router.join().unwrap();
}

#[test]
fn publishes_are_batched_and_echoes_arrive_with_their_metadata() {
    const N: u64 = 100;
    let (addr, router) = fake_router(|mut p| {
        p.welcome(1, 4096);
        for i in 0..N {
            let echo = p.frame(|f| {
                let Frame::Publish(m) = f else {
                    panic!("expected PUBLISH, got {f:?}")
                };
                assert_eq!(m.topic, format!("t/{i}").as_bytes());
                assert_eq!(m.payload.len(), i as usize);
                assert!(m.stamps.is_some_and(|s| s.publisher_send > 0));
                let mut raw = Vec::new();
                frame::encode_publish(
                    &mut raw,
                    std::str::from_utf8(m.topic).unwrap(),
                    m.payload,
                    PublishOptions {
                        seq: m.seq,
                        publisher_send: m.stamps.map(|s| s.publisher_send),
                    },
                    MAX,
                )
                .unwrap();
                raw
            });
            let discarded = if i == 0 { 5 } else { 0 };
            p.send(|o| {
                frame::encode_message_from_publish(o, &echo, discarded, 10, 20);
            });
        }
        p.send(|o| frame::encode_close(o, ErrorCode::NORMAL, "done"));
    });
    let opts = ClientOptions {
        batch_bytes: 1024,
        stamp: true,
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(addr, opts).unwrap();
    for i in 0..N {
        let payload = vec![b'x'; i as usize];
        let topic = format!("t/{i}");
        if i % 2 == 0 {
            c.publish(&topic, &payload).unwrap();
        } else {
            let seq = PublishOptions {
                seq: Some(i),
                publisher_send: None,
            };
            c.publish_with(&topic, &payload, seq).unwrap();
        }
    }
    c.flush().unwrap();
    assert_eq!(c.pending_bytes(), 0);
    let got: Vec<OwnedMessage> = c.messages().collect::<Result<_, _>>().unwrap();
    assert_eq!(got.len(), N as usize);
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.topic, format!("t/{i}"));
        assert_eq!(m.payload.len(), i);
        assert_eq!(m.discarded, if i == 0 { 5 } else { 0 });
        assert_eq!(m.seq, (i % 2 == 1).then_some(i as u64));
        let s = m.stamps.expect("stamped");
        assert!(s.publisher_send > 0);
        assert_eq!((s.router_in, s.router_out), (10, 20));
    }
    router.join().unwrap();
}

#[test]
fn fatal_error_is_reported_after_the_messages_before_it() {
    let (addr, router) = fake_router(|mut p| {
        p.welcome(1, 4096);
        p.send(|o| {
            message(o, "a", b"last words", 0);
            frame::encode_error(o, 0, ErrorCode::SLOW_CONSUMER, true, "too slow");
        });
    });
    let mut c = Client::connect(addr).unwrap();
    let mut got = Vec::new();
    let err = loop {
        match c.poll(Wait::Forever, |m| got.push(m.payload().to_vec())) {
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert_eq!(got, [b"last words"]);
    assert!(
        matches!(
            err,
            Error::Closed {
                code: ErrorCode::SLOW_CONSUMER,
                ..
            }
        ),
        "{err}"
    );
    // Sticky: every later call says the same.
    assert!(matches!(c.publish("a", b""), Err(Error::Closed { .. })));
    let rest: Vec<_> = c.messages().collect();
    assert!(matches!(&rest[..], [Err(Error::Closed { .. })]), "{rest:?}");
    router.join().unwrap();
}

#[test]
fn end_of_stream_ends_the_iterator() {
    let (addr, router) = fake_router(|mut p| {
        p.welcome(1, 4096);
        p.send(|o| message(o, "a", b"only", 0));
    });
    let mut c = Client::connect(addr).unwrap();
    router.join().unwrap();
    let got: Vec<_> = c.messages().map(Result::unwrap).collect();
    assert_eq!(got.len(), 1);
    match c.recv(Wait::NoWait) {
        Err(Error::Closed { code, reason }) => {
            assert_eq!(code, ErrorCode::NORMAL);
            assert_eq!(reason, "connection closed by router");
        }
        other => panic!("expected Closed, got {other:?}"),
    }
}

#[test]
fn unsolicited_error_is_reported_and_the_stream_goes_on() {
    let (addr, router) = fake_router(|mut p| {
        p.welcome(1, 4096);
        p.send(|o| {
            frame::encode_error(o, 0, ErrorCode::UNSUPPORTED, false, "not yet");
            message(o, "a", b"still here", 0);
        });
        p.closing();
    });
    let mut c = Client::connect(addr).unwrap();
    let mut got = Vec::new();
    let mut errors = Vec::new();
    while got.is_empty() {
        if let Err(e) = c.poll(Wait::Forever, |m| got.push(m.payload().to_vec())) {
            errors.push(e);
        }
    }
    assert!(
        matches!(
            &errors[..],
            [Error::Rejected {
                code: ErrorCode::UNSUPPORTED,
                ..
            }]
        ),
        "{errors:?}"
    );
    assert_eq!(got, [b"still here"]);
    c.close().unwrap();
    router.join().unwrap();
}

#[test]
fn handshake_refusal_is_a_close() {
    let (addr, router) = fake_router(|mut p| {
        p.frame(|f| assert!(matches!(f, Frame::Hello { .. })));
        p.send(|o| frame::encode_error(o, 0, ErrorCode::TOO_MANY_CLIENTS, true, "full"));
    });
    match Client::connect(addr) {
        Err(Error::Closed { code, reason }) => {
            assert_eq!(code, ErrorCode::TOO_MANY_CLIENTS);
            assert_eq!(reason, "full");
        }
        other => panic!("expected Closed, got {other:?}"),
    }
    router.join().unwrap();
}

#[test]
fn silent_router_times_the_handshake_out() {
    let (addr, router) = fake_router(|mut p| {
        p.frame(|f| assert!(matches!(f, Frame::Hello { .. })));
        // Say nothing until the client gives up.
        while p.try_frame(|_| ()).is_some() {}
    });
    let opts = ClientOptions {
        connect_timeout: Duration::from_millis(100),
        ..ClientOptions::default()
    };
    match Client::connect_with(addr, opts) {
        Err(Error::Timeout { what, .. }) => assert_eq!(what, "the router's WELCOME"),
        other => panic!("expected Timeout, got {other:?}"),
    }
    router.join().unwrap();
}

#[test]
fn connect_refused_says_what_to_do() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // The listener is gone: nothing listens on `addr` now.
    let err = Client::connect(addr).unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("cannot connect to router at {addr}: connection refused (is `tickwire router` running?)")
    );
}

#[test]
fn local_validation_and_router_frame_limit() {
    let (addr, router) = fake_router(|mut p| {
        p.welcome(1, 1024);
        p.closing();
    });
    let mut c = Client::connect(addr).unwrap();
    assert!(matches!(c.publish("a/*", b""), Err(Error::InvalidTopic(_))));
    assert!(matches!(c.publish("", b""), Err(Error::InvalidTopic(_))));
    assert!(matches!(
        c.publish("a", &[0; 2000]),
        Err(Error::TooLarge(_))
    ));
    assert_eq!(c.pending_bytes(), 0);
    c.close().unwrap();
    router.join().unwrap();
}

#[test]
fn a_frame_larger_than_the_receive_buffer_grows_it() {
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    let sent = big.clone();
    let (addr, router) = fake_router(move |mut p| {
        p.welcome(1, 4096);
        p.send(|o| {
            message(o, "big", &sent, 0);
            message(o, "small", b"s", 0);
        });
        p.closing();
    });
    let opts = ClientOptions {
        recv_buffer: 1024,
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(addr, opts).unwrap();
    let m = c.recv(Wait::Forever).unwrap().unwrap();
    assert_eq!((m.topic(), m.payload()), ("big", &big[..]));
    let m = c.recv(Wait::Forever).unwrap().unwrap();
    assert_eq!(m.topic(), "small");
    c.close().unwrap();
    router.join().unwrap();
}

#[test]
fn a_frame_above_our_max_frame_is_a_protocol_error() {
    let (addr, router) = fake_router(|mut p| {
        p.welcome(1, 4096);
        p.send(|o| message(o, "big", &[0; 5000], 0));
        // The client gives up on the connection and says why.
        p.frame(|f| {
            assert!(matches!(
                f,
                Frame::Close {
                    code: ErrorCode::MALFORMED_FRAME,
                    ..
                }
            ))
        });
    });
    let opts = ClientOptions {
        max_frame: 4096,
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(addr, opts).unwrap();
    let err = c.recv(Wait::Forever).unwrap_err();
    assert!(matches!(err, Error::Protocol(_)), "{err:?}");
    assert!(matches!(c.recv(Wait::NoWait), Err(Error::Closed { .. })));
    router.join().unwrap();
}

#[test]
fn flush_waits_while_the_router_is_not_reading() {
    const N: usize = 1000;
    const SIZE: usize = 16 * 1024;
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (addr, router) = fake_router(move |mut p| {
        p.welcome(1, 64 * 1024);
        // Not reading lets the socket buffers fill, so the client's writes block.
        let _ = go_rx.recv_timeout(Duration::from_millis(200));
        for i in 0..N {
            p.frame(|f| match f {
                Frame::Publish(m) => assert_eq!((m.payload.len(), m.payload[0]), (SIZE, i as u8)),
                other => panic!("expected PUBLISH, got {other:?}"),
            });
        }
        p.closing();
    });
    let opts = ClientOptions {
        batch_bytes: 0,
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(addr, opts).unwrap();
    for i in 0..N {
        c.publish("bulk", &[i as u8; SIZE]).unwrap();
    }
    drop(go_tx);
    assert_eq!(c.pending_bytes(), 0);
    c.close().unwrap();
    router.join().unwrap();
}

#[test]
fn a_non_utf8_topic_is_a_protocol_error_even_while_waiting_for_an_ack() {
    let (addr, router) = fake_router(|mut p| {
        p.welcome(1, 4096);
        p.request(false, "a");
        // MESSAGE, topic length 1, topic byte 0xff.
        p.send(|o| o.extend_from_slice(&[9, 0, 0, 0, 0x21, 0, 1, 0, 0xff]));
        while p.try_frame(|_| ()).is_some() {}
    });
    let mut c = Client::connect(addr).unwrap();
    let err = c.subscribe("a").unwrap_err();
    assert!(matches!(err, Error::Protocol(_)), "{err:?}");
    assert!(matches!(
        c.poll(Wait::NoWait, |_| ()),
        Err(Error::Closed { .. })
    ));
    drop(c);
    router.join().unwrap();
}
