//! A client closing with 10,000 subscriptions, against the real event loop
//! (`Router::run` in a thread, TCP on 127.0.0.1): the loop takes its patterns out of the
//! index a bounded number per turn (`core::TEARDOWN_PATTERNS_PER_TURN`) and keeps
//! turning until they are gone, serving the others meanwhile; its slot then comes free
//! (at `max_clients` a newcomer is refused until then, and admitted after). The core's
//! own tests (`core.rs`) check the per-turn bound; this one that the driver finishes the
//! work. Nothing here is timed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use tickwire_router::{Config, IdleStrategy, Router};
use tickwire_wire::frame::{self, ErrorCode, Frame, PROTOCOL_VERSION};

/// A client speaking raw frames.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

/// What a frame said, owned.
#[derive(Debug, PartialEq)]
enum Got {
    Welcome,
    Ack,
    Message(String),
    Error(ErrorCode),
    Other,
}

impl Raw {
    fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.set_nodelay(true).unwrap();
        Raw { s, buf: Vec::new() }
    }

    fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }

    fn hello(&mut self) -> Got {
        let mut b = Vec::new();
        frame::encode_hello(&mut b, PROTOCOL_VERSION, "t");
        self.send(&b);
        self.next()
    }

    /// The next frame (the read times out after 30 s: a hung router fails the test).
    fn next(&mut self) -> Got {
        loop {
            if let Some((f, n)) = frame::decode(&self.buf, u32::MAX).unwrap() {
                let got = match f {
                    Frame::Welcome { .. } => Got::Welcome,
                    Frame::Ack { .. } => Got::Ack,
                    Frame::Message(m) => Got::Message(String::from_utf8_lossy(m.topic).into()),
                    Frame::Error { code, .. } => Got::Error(code),
                    _ => Got::Other,
                };
                self.buf.drain(..n);
                return got;
            }
            let mut chunk = [0u8; 64 << 10];
            let n = self.s.read(&mut chunk).unwrap();
            assert!(n > 0, "the router closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

#[test]
fn a_client_closing_with_10000_subscriptions_is_torn_down_and_its_slot_comes_free() {
    let cfg = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        idle: IdleStrategy::Block,
        max_clients: 3,
        ..Config::default()
    };
    let router = Router::bind(cfg).unwrap();
    let addr = router.local_addr();
    let handle = router.handle();
    let thread = thread::spawn(move || router.run());

    let mut a = Raw::connect(addr);
    assert_eq!(a.hello(), Got::Welcome);
    let mut b = Vec::new();
    for i in 0..10_000 {
        frame::encode_subscribe(&mut b, 1, &format!("p{i}/l1/l2/l3/l4/l5/l6/l7/l8/l9"));
    }
    a.send(&b);
    for _ in 0..10_000 {
        assert_eq!(a.next(), Got::Ack);
    }
    let (mut sub, mut publisher) = (Raw::connect(addr), Raw::connect(addr));
    assert_eq!(sub.hello(), Got::Welcome);
    assert_eq!(publisher.hello(), Got::Welcome);
    let mut f = Vec::new();
    frame::encode_subscribe(&mut f, 1, "t/x");
    sub.send(&f);
    assert_eq!(sub.next(), Got::Ack);

    drop(a);
    // The others are served whatever is left of the teardown.
    let mut f = Vec::new();
    frame::encode_publish(&mut f, "t/x", b"x", Default::default(), u32::MAX).unwrap();
    for _ in 0..20 {
        publisher.send(&f);
        assert_eq!(sub.next(), Got::Message("t/x".into()));
    }
    // The third slot is refused while the teardown holds it, and comes free after.
    let mut refused = 0;
    loop {
        let mut d = Raw::connect(addr);
        match d.hello() {
            Got::Welcome => break,
            Got::Error(ErrorCode::TOO_MANY_CLIENTS) => {
                refused += 1;
                assert!(refused < 3_000, "the closed client's slot never came free");
                thread::sleep(Duration::from_millis(5));
            }
            other => panic!("{other:?}"),
        }
    }

    handle.shutdown();
    let totals = thread.join().unwrap().unwrap();
    assert_eq!(totals.refused, refused);
}
