//! The client's guaranteed-messaging driver against a scripted fake router on
//! 127.0.0.1 (raw frames from `tickwire_wire`): PUB_OPEN / window / ACK / NACK,
//! resend after a lost connection, BIND / DELIVER / CONSUMER_ACK, queue requests, and
//! frames that arrive while a request waits being kept for `poll_events`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use tickwire_client::{
    Client, ClientOptions, Error, Event, GuaranteedPublisher, NackAction, NackReason, Outcome,
    QueueConsumer, QueueOp, ReconnectOptions, Start, Wait,
};
use tickwire_wire::frame::{self, decode, flags, ErrorCode, Frame, DEFAULT_MAX_FRAME};
use tickwire_wire::gm::{self, Stored};

/// One accepted connection of the fake router, blocking IO.
struct Fake {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Fake {
    fn accept(l: &TcpListener) -> Fake {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut f = Fake { s, buf: Vec::new() };
        let hello = f.next();
        assert!(matches!(
            decode(&hello, DEFAULT_MAX_FRAME).unwrap().unwrap().0,
            Frame::Hello { .. }
        ));
        let mut out = Vec::new();
        frame::encode_welcome(&mut out, 1, DEFAULT_MAX_FRAME, "fake");
        f.send(&out);
        f
    }

    /// The next frame's raw bytes.
    fn next(&mut self) -> Vec<u8> {
        loop {
            if let Ok(Some((_, n))) = decode(&self.buf, DEFAULT_MAX_FRAME) {
                let f = self.buf[..n].to_vec();
                self.buf.drain(..n);
                return f;
            }
            let mut tmp = [0u8; 4096];
            let n = self.s.read(&mut tmp).unwrap();
            assert!(n > 0, "client closed the connection");
            self.buf.extend_from_slice(&tmp[..n]);
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    fn send_with(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        let mut out = Vec::new();
        f(&mut out);
        self.send(&out);
    }

    /// Expects PUB_OPEN for `name`; answers PUB_OPENED.
    fn open(&mut self, name: &str, window: u32, last_seq: u64) {
        let b = self.next();
        let Frame::PubOpen {
            request_id,
            name: n,
            ..
        } = one(&b)
        else {
            panic!("expected PUB_OPEN, got {:?}", one(&b))
        };
        assert_eq!(n, name);
        self.send_with(|o| gm::encode_pub_opened(o, request_id, window, last_seq));
    }

    /// Expects a guaranteed PUBLISH; returns (seq, topic, payload).
    fn publish(&mut self) -> (u64, String, Vec<u8>) {
        let b = self.next();
        let Frame::Publish(p) = one(&b) else {
            panic!("expected PUBLISH, got {:?}", one(&b))
        };
        assert_eq!(
            p.flags & (flags::GUARANTEED | flags::SEQ),
            flags::GUARANTEED | flags::SEQ
        );
        (
            p.seq.unwrap(),
            String::from_utf8(p.topic.to_vec()).unwrap(),
            p.payload.to_vec(),
        )
    }
}

fn one(b: &[u8]) -> Frame<'_> {
    decode(b, DEFAULT_MAX_FRAME).unwrap().unwrap().0
}

fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap().to_string();
    (l, a)
}

fn opts() -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    }
}

#[derive(Debug, PartialEq)]
enum Seen {
    Acked(u64, u64),
    Nacked(u64, NackReason, String),
}

#[test]
fn window_acks_and_nacks_reach_the_application_once() {
    let (l, addr) = listener();
    let router = thread::spawn(move || {
        let mut f = Fake::accept(&l);
        f.open("pub-a", 2, 10);
        assert_eq!(f.publish(), (11, "o/x".into(), b"one".to_vec()));
        assert_eq!(f.publish().0, 12);
        // The client is blocked on a full window until this ACK.
        thread::sleep(Duration::from_millis(50));
        f.send_with(|o| gm::encode_pub_ack(o, 11, 11));
        assert_eq!(f.publish(), (13, "o/x".into(), b"three".to_vec()));
        f.send_with(|o| {
            gm::encode_pub_nack(o, 12, NackReason::QUEUE_FULL, "queue q is full");
            gm::encode_pub_ack(o, 13, 13);
        });
        // publish_guaranteed_wait
        let (seq, _, _) = f.publish();
        assert_eq!(seq, 14);
        f.send_with(|o| gm::encode_pub_nack(o, 14, NackReason::TOO_LARGE, "too big"));
        f
    });
    let mut c = Client::connect_with(addr.as_str(), opts()).unwrap();
    assert!(matches!(
        c.publish_guaranteed("o/x", b"x"),
        Err(Error::PublisherNotOpen)
    ));
    let o = c.open_publisher("pub-a", 0).unwrap();
    assert_eq!((o.window, o.last_seq, o.resent), (2, 10, 0));
    assert_eq!(c.publish_guaranteed("o/x", b"one").unwrap(), 11);
    assert_eq!(c.publish_guaranteed("o/x", b"two").unwrap(), 12);
    assert!(matches!(
        c.try_publish_guaranteed("o/x", b"no"),
        Err(Error::WindowFull)
    ));
    assert_eq!(c.publish_guaranteed("o/x", b"three").unwrap(), 13);
    c.flush().unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        c.poll_events(Wait::Timeout(Duration::from_secs(5)), |ev| match ev {
            Event::Acked { first, last } => seen.push(Seen::Acked(first, last)),
            Event::Nacked { seq, reason, text } => {
                seen.push(Seen::Nacked(seq, reason, text.to_owned()))
            }
            other => panic!("unexpected {other:?}"),
        })
        .unwrap();
    }
    assert_eq!(
        seen,
        vec![
            Seen::Acked(11, 11),
            Seen::Nacked(12, NackReason::QUEUE_FULL, "queue q is full".into()),
            Seen::Acked(13, 13),
        ]
    );
    assert_eq!(
        c.publish_guaranteed_wait("o/x", b"four").unwrap(),
        Outcome::Nacked {
            reason: NackReason::TOO_LARGE,
            text: "too big".into()
        }
    );
    let counts = c.publish_counts().clone();
    assert_eq!((counts.published, counts.acked, counts.nacked), (4, 2, 2));
    assert_eq!(c.unanswered(), 0);
    drop(router.join().unwrap());
}

#[test]
fn a_reconnecting_publisher_resends_what_was_unanswered() {
    let (l, addr) = listener();
    let router = thread::spawn(move || {
        let mut f = Fake::accept(&l);
        f.open("gw-1", 8, 0);
        for want in 1..=3 {
            assert_eq!(f.publish().0, want);
        }
        f.send_with(|o| gm::encode_pub_ack(o, 1, 1));
        thread::sleep(Duration::from_millis(20));
        // The router dies: the answers to 2 and 3 are lost.
        drop(f);
        let mut f = Fake::accept(&l);
        // It had stored 2 before dying; 3 never arrived.
        f.open("gw-1", 8, 2);
        assert_eq!(f.publish(), (2, "t/a".into(), b"m2".to_vec()));
        assert_eq!(f.publish(), (3, "t/a".into(), b"m3".to_vec()));
        f.send_with(|o| gm::encode_pub_ack(o, 2, 3));
        assert_eq!(f.publish(), (4, "t/a".into(), b"m4".to_vec()));
        f.send_with(|o| gm::encode_pub_ack(o, 4, 4));
        f
    });
    let ro = ReconnectOptions {
        client: opts(),
        give_up_after: Some(Duration::from_secs(10)),
        ..ReconnectOptions::default()
    };
    let mut p = GuaranteedPublisher::connect(&addr, "gw-1", ro).unwrap();
    for i in 1..=3 {
        p.publish("t/a", format!("m{i}").as_bytes()).unwrap();
    }
    p.poll(Wait::NoWait).unwrap();
    // Waits through the lost connection, reconnects and resends 2 and 3.
    while p.counts().acked < 3 {
        p.poll(Wait::Timeout(Duration::from_millis(100))).unwrap();
    }
    assert_eq!(p.publish("t/a", b"m4").unwrap(), 4);
    assert!(p.wait_answered(Duration::from_secs(10)).unwrap());
    let c = p.counts().clone();
    assert_eq!((c.published, c.acked, c.nacked, c.resent), (4, 4, 0, 2));
    assert_eq!(p.reconnects(), 1);
    drop(router.join().unwrap());
}

#[test]
fn a_taken_over_identity_is_not_reconnected() {
    let (l, addr) = listener();
    let router = thread::spawn(move || {
        let mut f = Fake::accept(&l);
        f.open("gw-2", 8, 0);
        f.send_with(|o| {
            frame::encode_error(
                o,
                0,
                ErrorCode::TAKEN_OVER,
                true,
                "identity opened elsewhere",
            )
        });
        f
    });
    let mut p = GuaranteedPublisher::connect(&addr, "gw-2", ReconnectOptions::default()).unwrap();
    let e = loop {
        match p.poll(Wait::Timeout(Duration::from_millis(100))) {
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert!(
        matches!(e, Error::Closed { code, .. } if code == ErrorCode::TAKEN_OVER),
        "{e:?}"
    );
    assert_eq!(p.reconnects(), 0);
    drop(router.join().unwrap());
}

#[test]
fn bind_deliver_ack_and_queue_requests() {
    let (l, addr) = listener();
    let router = thread::spawn(move || {
        let mut f = Fake::accept(&l);
        // BIND to a missing queue.
        let b = f.next();
        let Frame::Bind { request_id, .. } = one(&b) else {
            panic!()
        };
        f.send_with(|o| {
            frame::encode_error(
                o,
                request_id,
                ErrorCode::NO_SUCH_QUEUE,
                false,
                "no queue nope",
            )
        });
        let b = f.next();
        let Frame::Bind {
            request_id,
            window,
            start,
            queue,
        } = one(&b)
        else {
            panic!()
        };
        assert_eq!((window, start, queue), (4, Start::Queue, "orders"));
        let deliver = |o: &mut Vec<u8>, id: u64, count: u32| {
            let m = Stored {
                seq: id,
                stamps: None,
                topic: b"orders/new",
                payload: b"buy",
            };
            gm::encode_deliver(o, 7, id, count, count > 1, m, DEFAULT_MAX_FRAME).unwrap();
        };
        f.send_with(|o| {
            gm::encode_bound(o, request_id, 7, true);
            deliver(o, 100, 1);
        });
        // A QUEUE_REQUEST, with a delivery arriving before its reply.
        let b = f.next();
        let Frame::QueueRequest {
            request_id,
            op,
            arg,
        } = one(&b)
        else {
            panic!()
        };
        assert_eq!((op, arg), (QueueOp::Show, "orders"));
        f.send_with(|o| {
            deliver(o, 101, 2);
            gm::encode_queue_reply(o, request_id, r#"{"name":"orders"}"#);
        });
        // The consumer's answers, in order.
        let acks: Vec<_> = (0..2).map(|_| f.next()).collect();
        assert_eq!(
            one(&acks[0]),
            Frame::ConsumerAck {
                binding: 7,
                first: 100,
                last: 100
            }
        );
        assert_eq!(
            one(&acks[1]),
            Frame::ConsumerNack {
                binding: 7,
                action: NackAction::DeadLetter,
                msg_id: 101
            }
        );
        let b = f.next();
        let Frame::Unbind {
            request_id,
            binding: 7,
        } = one(&b)
        else {
            panic!()
        };
        f.send_with(|o| {
            frame::encode_ack(o, request_id);
            gm::encode_bound(o, 0, 8, true);
        });
        f
    });
    let mut c = Client::connect_with(addr.as_str(), opts()).unwrap();
    let e = c.bind("nope", 4, Start::Queue).unwrap_err();
    assert!(matches!(e, Error::Rejected { code, .. } if code == ErrorCode::NO_SUCH_QUEUE));
    let b = c.bind("orders", 4, Start::Queue).unwrap();
    assert!(b.active);
    let json = c.queue_request(QueueOp::Show, "orders").unwrap();
    assert_eq!(json, r#"{"name":"orders"}"#);
    let mut got = Vec::new();
    while got.len() < 2 {
        c.poll_events(Wait::Timeout(Duration::from_secs(5)), |ev| {
            let Event::Delivery(d) = ev else {
                panic!("unexpected {ev:?}")
            };
            assert_eq!(
                (d.binding, d.topic, d.payload),
                (7, &b"orders/new"[..], &b"buy"[..])
            );
            got.push((d.msg_id, d.delivery_count, d.redelivered));
        })
        .unwrap();
    }
    assert_eq!(got, vec![(100, 1, false), (101, 2, true)]);
    c.ack(b.id, 100).unwrap();
    c.nack(b.id, 101, NackAction::DeadLetter).unwrap();
    c.unbind(b.id).unwrap();
    let mut activated = None;
    while activated.is_none() {
        c.poll_events(Wait::Timeout(Duration::from_secs(5)), |ev| {
            if let Event::Activated { binding } = ev {
                activated = Some(binding.0);
            }
        })
        .unwrap();
    }
    assert_eq!(activated, Some(8));
    drop(router.join().unwrap());
}

#[test]
fn a_queue_consumer_binds_again_after_a_lost_connection() {
    let (l, addr) = listener();
    let deliver = |o: &mut Vec<u8>, binding: u32, id: u64, count: u32| {
        let m = Stored {
            seq: id,
            stamps: None,
            topic: b"q/t",
            payload: b"p",
        };
        gm::encode_deliver(o, binding, id, count, count > 1, m, DEFAULT_MAX_FRAME).unwrap();
    };
    let router = thread::spawn(move || {
        let mut f = Fake::accept(&l);
        let b = f.next();
        let Frame::Bind { request_id, .. } = one(&b) else {
            panic!()
        };
        f.send_with(|o| {
            gm::encode_bound(o, request_id, 1, true);
            deliver(o, 1, 10, 1);
            deliver(o, 1, 11, 1);
        });
        let b = f.next();
        assert_eq!(
            one(&b),
            Frame::ConsumerAck {
                binding: 1,
                first: 10,
                last: 10
            }
        );
        // Dies before 11 is acknowledged.
        drop(f);
        let mut f = Fake::accept(&l);
        let b = f.next();
        let Frame::Bind {
            request_id, queue, ..
        } = one(&b)
        else {
            panic!()
        };
        assert_eq!(queue, "q");
        f.send_with(|o| {
            gm::encode_bound(o, request_id, 2, true);
            deliver(o, 2, 11, 2);
        });
        let b = f.next();
        assert_eq!(
            one(&b),
            Frame::ConsumerAck {
                binding: 2,
                first: 11,
                last: 11
            }
        );
        f
    });
    let ro = ReconnectOptions {
        client: opts(),
        ..ReconnectOptions::default()
    };
    let mut c = QueueConsumer::connect(&addr, "q", 8, Start::Queue, ro).unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        c.poll(Wait::Timeout(Duration::from_secs(5)), |d| {
            got.push((d.msg_id, d.redelivered))
        })
        .unwrap();
    }
    c.ack(10).unwrap();
    c.client().flush().unwrap();
    while got.len() < 3 {
        c.poll(Wait::Timeout(Duration::from_millis(100)), |d| {
            got.push((d.msg_id, d.redelivered))
        })
        .unwrap();
    }
    assert_eq!(got, vec![(10, false), (11, false), (11, true)]);
    assert_eq!((c.binding().id.0, c.reconnects()), (2, 1));
    c.ack(11).unwrap();
    c.client().flush().unwrap();
    drop(router.join().unwrap());
}
