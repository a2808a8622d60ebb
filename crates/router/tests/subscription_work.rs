//! A read of many SUBSCRIBE / UNSUBSCRIBE frames against the real event loop
//! (`Router::run` in a thread, TCP on 127.0.0.1): the
//! core takes a bounded part per turn (`core::SUBSCRIPTION_WORK_PER_READ`) and the
//! driver hands it the rest on the next turns before reading more. Everything is
//! answered, in order, also when the client closes its side right after writing;
//! another client is served meanwhile. Nothing here is timed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use tickwire_router::{Config, IdleStrategy, Router};
use tickwire_wire::frame::{self, Frame, PROTOCOL_VERSION};

/// Reads frames from `s` until `want` of them arrived; each as a short text.
fn frames(s: &mut TcpStream, buf: &mut Vec<u8>, want: usize) -> Vec<String> {
    let mut got = Vec::new();
    while got.len() < want {
        if let Some((f, n)) = frame::decode(buf, u32::MAX).unwrap() {
            got.push(match f {
                Frame::Welcome { .. } => "WELCOME".to_string(),
                Frame::Ack { request_id } => format!("ACK {request_id}"),
                Frame::Pong(token) => format!("PONG {token}"),
                Frame::Message(m) => format!("MSG {}", String::from_utf8_lossy(m.topic)),
                other => format!("{other:?}"),
            });
            buf.drain(..n);
            continue;
        }
        let mut chunk = [0u8; 64 << 10];
        // The read times out after 30 s: a hung router fails the test.
        let n = s.read(&mut chunk).unwrap();
        assert!(
            n > 0,
            "the router closed the connection after {} frames",
            got.len()
        );
        buf.extend_from_slice(&chunk[..n]);
    }
    got
}

fn connect(addr: SocketAddr, name: &str) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut b = Vec::new();
    frame::encode_hello(&mut b, PROTOCOL_VERSION, name);
    s.write_all(&b).unwrap();
    let mut buf = Vec::new();
    assert_eq!(frames(&mut s, &mut buf, 1), ["WELCOME"]);
    (s, buf)
}

#[test]
fn a_read_of_20000_subscription_changes_is_answered_in_order_across_turns() {
    let cfg = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        idle: IdleStrategy::Block,
        ..Config::default()
    };
    let router = Router::bind(cfg).unwrap();
    let addr = router.local_addr();
    let handle = router.handle();
    let thread = thread::spawn(move || router.run());

    let (mut sub, mut sub_buf) = connect(addr, "sub");
    let (mut publisher, _) = connect(addr, "pub");
    let mut b = Vec::new();
    frame::encode_subscribe(&mut b, 1, "t/x");
    sub.write_all(&b).unwrap();
    assert_eq!(frames(&mut sub, &mut sub_buf, 1), ["ACK 1"]);

    let (mut a, mut a_buf) = connect(addr, "a");
    let mut b = Vec::new();
    for i in 0..10_000 {
        frame::encode_subscribe(&mut b, 1, &format!("p{i}/l1/l2/l3/l4/l5/l6/l7/l8/l9"));
    }
    for i in 0..10_000 {
        frame::encode_unsubscribe(&mut b, 2, &format!("p{i}/l1/l2/l3/l4/l5/l6/l7/l8/l9"));
    }
    frame::encode_subscribe(&mut b, 3, "t/x");
    frame::encode_ping(&mut b, 9);
    a.write_all(&b).unwrap();
    // Closing its side at once: what it wrote is still all handled.
    a.shutdown(Shutdown::Write).unwrap();

    // Another client is served meanwhile.
    let mut f = Vec::new();
    frame::encode_publish(&mut f, "t/x", b"x", Default::default(), u32::MAX).unwrap();
    publisher.write_all(&f).unwrap();
    assert_eq!(frames(&mut sub, &mut sub_buf, 1), ["MSG t/x"]);

    let got = frames(&mut a, &mut a_buf, 20_002);
    assert!(got[..10_000].iter().all(|g| g == "ACK 1"));
    assert!(got[10_000..20_000].iter().all(|g| g == "ACK 2"));
    assert_eq!(got[20_000..], ["ACK 3", "PONG 9"]);

    handle.shutdown();
    thread.join().unwrap().unwrap();
}

/// The same for routing (`core::DELIVERY_WORK_PER_READ`): one write of 30,000 PUBLISHes
/// to a topic three clients subscribe to is routed a bounded part per turn (8,192
/// PUBLISHes a call here), and every subscriber gets every message, once, in
/// order, also when the publisher closes its side right after writing.
#[test]
fn a_read_of_30000_publishes_to_three_subscribers_is_routed_in_order_across_turns() {
    let cfg = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        idle: IdleStrategy::Block,
        // Nothing may be discarded: every message must arrive.
        egress_limit: 64 << 20,
        slow_consumer: tickwire_router::SlowConsumerPolicy::Disconnect,
        ..Config::default()
    };
    let router = Router::bind(cfg).unwrap();
    let addr = router.local_addr();
    let handle = router.handle();
    let thread = thread::spawn(move || router.run());

    const N: usize = 30_000;
    let readers: Vec<_> = (0..3)
        .map(|i| {
            let (mut s, mut buf) = connect(addr, &format!("sub{i}"));
            let mut b = Vec::new();
            frame::encode_subscribe(&mut b, 1, "t/>");
            s.write_all(&b).unwrap();
            assert_eq!(frames(&mut s, &mut buf, 1), ["ACK 1"]);
            (s, buf)
        })
        .collect();
    let (mut publisher, _) = connect(addr, "pub");
    let readers: Vec<_> = readers
        .into_iter()
        .map(|(mut s, mut buf)| thread::spawn(move || frames(&mut s, &mut buf, N)))
        .collect();
    let mut b = Vec::new();
    for i in 0..N {
        frame::encode_publish(
            &mut b,
            &format!("t/{i}"),
            b"x",
            Default::default(),
            u32::MAX,
        )
        .unwrap();
    }
    publisher.write_all(&b).unwrap();
    publisher.shutdown(Shutdown::Write).unwrap();
    let want: Vec<String> = (0..N).map(|i| format!("MSG t/{i}")).collect();
    for r in readers {
        let got = r.join().unwrap();
        assert!(
            got == want,
            "a subscriber's messages differ (first: {:?})",
            got.first()
        );
    }

    handle.shutdown();
    thread.join().unwrap().unwrap();
}
