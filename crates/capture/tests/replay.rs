//! Replay over real loopback multicast: a capture written by the crate is replayed at a
//! speed factor and received by a group member in another thread. Checked by counts and
//! order (no timing assertions): everything arrives, once, in file order, and the
//! scheduled spacing is kept (the replay is never early).

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use tickwire_capture::net::{
    capture, group_receiver, replay, CaptureOptions, CaptureReport, ReplayOptions,
};
use tickwire_capture::{CaptureWriter, Captured, Speed};
use tickwire_rt::StopFlag;

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh, empty directory for one test (`tickwire-capture-it-*`), removed when the
/// guard drops.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tickwire-capture-it-")
        .tempdir()
        .unwrap()
}

/// Writes the capture file `name` in `dir`: `n` datagrams from `src` to `group`, the i-th at
/// `first + i * step` ns carrying `payload(i)`; returns it loaded back.
fn capture_file(
    dir: &Path,
    name: &str,
    src: &str,
    group: SocketAddrV4,
    n: u64,
    (first, step): (u64, u64),
    payload: impl Fn(u64) -> Vec<u8>,
) -> Captured {
    let path = dir.join(name);
    let mut w = CaptureWriter::create(&path).unwrap();
    for i in 0..n {
        w.write(first + i * step, src.parse().unwrap(), group, &payload(i))
            .unwrap();
    }
    w.finish().unwrap();
    Captured::load(&path).unwrap()
}

/// A capture of `group` into `out` on a thread of its own, stopped by the flag
/// returned, after `duration` or `max_packets`.
fn start_capture(
    group: SocketAddrV4,
    out: &Path,
    duration: Duration,
    max_packets: Option<u64>,
) -> (std::thread::JoinHandle<CaptureReport>, StopFlag) {
    let stop = StopFlag::unregistered();
    let opts = CaptureOptions {
        group,
        interface: Ipv4Addr::LOCALHOST,
        duration: Some(duration),
        max_packets,
        progress: None,
    };
    let (out, flag) = (out.to_path_buf(), stop.clone());
    (
        std::thread::spawn(move || capture(&opts, &out, &flag).unwrap()),
        stop,
    )
}

/// One pass of `cap` to its recorded destinations, as fast as it goes.
fn replay_once(cap: &Captured) {
    let opts = ReplayOptions {
        speed: Speed::Max,
        target: None,
        interface: Ipv4Addr::LOCALHOST,
        passes: Some(1),
        progress: None,
    };
    replay(cap, &opts, &StopFlag::unregistered()).unwrap();
}

#[test]
fn replay_delivers_every_datagram_in_file_order_on_schedule() {
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 1), free_port());
    let dir = scratch();
    // 300 datagrams recorded 200 µs apart (60 ms); at 4x the pass takes 15 ms.
    let cap = capture_file(
        dir.path(),
        "sched.pcap",
        "127.0.0.1:1",
        group,
        300,
        (1_000_000_000, 200_000),
        |i| i.to_be_bytes().to_vec(),
    );

    let rx = group_receiver(group, Ipv4Addr::LOCALHOST).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while got.len() < 600 {
            match rx.recv(&mut buf) {
                Ok(8) => got.push(u64::from_be_bytes(buf[..8].try_into().unwrap())),
                Ok(_) => panic!("unexpected datagram size"),
                Err(_) => break,
            }
        }
        got
    });
    let opts = ReplayOptions {
        speed: Speed::Factor(4.0),
        target: None,
        interface: Ipv4Addr::LOCALHOST,
        passes: Some(2),
        progress: None,
    };
    let report = replay(&cap, &opts, &StopFlag::unregistered()).unwrap();
    let got = receiver.join().unwrap();
    assert_eq!(report.packets, 600);
    assert_eq!(report.passes, 2);
    assert_eq!(report.send_errors, 0);
    assert_eq!(
        report.lateness.len(),
        600,
        "every send is measured against its schedule"
    );
    let expected: Vec<u64> = (0..300).chain(0..300).collect();
    assert_eq!(got, expected, "every datagram once per pass, in file order");
    // When each datagram is due is the pure schedule's job, tested with fixed times
    // in `speed.rs` (`schedule_is_absolute_and_scaled`); no wall-clock duration is
    // asserted here (the machine may be loaded).
}

#[test]
fn capture_records_what_a_replay_sends() {
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 2), free_port());
    let dir = scratch();
    let cap = capture_file(
        dir.path(),
        "src.pcap",
        "127.0.0.1:9",
        group,
        100,
        (5_000_000_000, 10_000),
        |i| vec![(i % 251) as u8; 1 + (i as usize * 13) % 1200],
    );

    let out = dir.path().join("captured.pcap");
    let (capturer, _stop) = start_capture(group, &out, Duration::from_secs(20), Some(100));
    // The capture joins the group asynchronously: replay until it has everything, at
    // most a bounded number of passes.
    for _ in 0..200 {
        if capturer.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        replay_once(&cap);
    }
    let report = capturer.join().unwrap();
    assert_eq!(report.packets, 100);
    let recorded = Captured::load(&out).unwrap();
    assert_eq!(recorded.entries.len(), 100);
    // Whatever pass the capture started in, it holds consecutive datagrams of the file
    // (modulo the pass boundary), each byte-identical to the source.
    let first = cap
        .entries
        .iter()
        .position(|e| cap.payload(e) == recorded.payload(&recorded.entries[0]))
        .unwrap();
    for (k, e) in recorded.entries.iter().enumerate() {
        let src = &cap.entries[(first + k) % 100];
        assert_eq!(recorded.payload(e), cap.payload(src));
        assert_eq!(e.dst, group);
    }
    assert!(recorded
        .entries
        .windows(2)
        .all(|w| w[0].unix_ns <= w[1].unix_ns));
}

#[test]
fn a_running_capture_can_be_read_a_second_behind() {
    // docs/market-data.md: md capture writes its records to the file once a second, so
    // a replay of a capture still running takes what it recorded up to then.
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 3), free_port());
    let dir = scratch();
    let cap = capture_file(
        dir.path(),
        "src.pcap",
        "127.0.0.1:9",
        group,
        50,
        (5_000_000_000, 10_000),
        |i| vec![i as u8; 64],
    );
    let out = dir.path().join("live.pcap");
    let (capturer, stop) = start_capture(group, &out, Duration::from_secs(60), None);
    // Replay until the running capture's file shows datagrams (bounded: 20 s).
    let mut seen = 0;
    for _ in 0..200 {
        replay_once(&cap);
        std::thread::sleep(Duration::from_millis(100));
        if let Ok(c) = Captured::load(&out) {
            seen = c.entries.len();
            if seen > 0 {
                break;
            }
        }
    }
    assert!(!capturer.is_finished(), "the capture is still running");
    stop.set();
    let report = capturer.join().unwrap();
    assert!(
        seen > 0,
        "nothing readable in the running capture's file (it recorded {} in the end)",
        report.packets
    );
}
