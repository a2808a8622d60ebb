//! `tickwire fix acceptor --app echo` against counterparties that ask for work and do
//! not read the answers, on 127.0.0.1, with a well-behaved session on the same
//! acceptor that must keep working:
//! - a peer that floods orders and never reads the echoes is no longer read once 4 MiB
//!   of answers wait for it (its own TCP window fills, not the acceptor's memory);
//! - a peer that sends a flood of ResendRequests for its whole history gets them
//!   answered a step at a time, eight waiting at most: the acceptor neither freezes
//!   nor buffers the resends of every request;
//! - connections that never send a byte, more than the pending-Logon cap, do not lock
//!   a real counterparty out: the oldest is evicted;
//! - a standard output nobody reads does not freeze the engine: lines that do not fit
//!   the queue are dropped and counted.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fix_support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fix_support::{free_port, temp_dir, Peer};
use tickwire_fix::codec::{frame_len, Encoder, TimestampPrecision};

/// An acceptor (VENUE) of two sessions on one port: ATTACK and GOOD.
fn acceptor_cfg(dir: &Path, port: u16) -> PathBuf {
    let text = format!(
        "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptHost=127.0.0.1\n\
         SocketAcceptPort={port}\nStartTime=00:00:00\nEndTime=00:00:00\n\
         FileStorePath={d}/store\nBeginString=FIX.4.4\nSenderCompID=VENUE\n\n\
         [SESSION]\nTargetCompID=ATTACK\n\n[SESSION]\nTargetCompID=GOOD\n",
        d = dir.display(),
    );
    let p = dir.join("acceptor.cfg");
    std::fs::write(&p, text).unwrap();
    p
}

/// A counterparty on a raw socket: builds messages with the codec, reads frames.
struct Client {
    sock: TcpStream,
    enc: Encoder,
    seq: u64,
    buf: Vec<u8>,
}

impl Client {
    fn logon(port: u16, name: &str, heartbeat: u32) -> Client {
        let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
        sock.set_nodelay(true).unwrap();
        let mut enc = Encoder::new("FIX.4.4");
        enc.set_header_fields(&[(49, name.as_bytes()), (56, b"VENUE")]);
        let mut c = Client {
            sock,
            enc,
            seq: 1,
            buf: Vec::new(),
        };
        let hb = heartbeat.to_string();
        let logon = c.msg(b"A", &[(98, "0"), (108, &hb)]);
        c.sock.write_all(&logon).unwrap();
        let reply = c.next(Instant::now() + Duration::from_secs(30)).unwrap();
        assert!(
            contains(&reply, "\x0135=A\x01"),
            "no Logon answer: {}",
            show(&reply)
        );
        c
    }

    /// The next message of ours, numbered.
    fn msg(&mut self, msg_type: &[u8], fields: &[(u32, &str)]) -> Vec<u8> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        self.enc.begin(msg_type);
        self.enc.field_u64(34, self.seq);
        self.enc
            .field_timestamp(52, now, TimestampPrecision::Millis);
        for (tag, value) in fields {
            self.enc.field(*tag, value.as_bytes());
        }
        self.seq += 1;
        self.enc.finish().to_vec()
    }

    fn order(&mut self, id: u64) -> Vec<u8> {
        let id = format!("O{id}");
        self.msg(
            b"D",
            &[
                (11, &id),
                (21, "1"),
                (38, "100"),
                (40, "1"),
                (54, "1"),
                (55, "IBM"),
                (60, "20260101-00:00:00"),
            ],
        )
    }

    /// The next complete message, or None at `deadline` (or when the acceptor closed).
    fn next(&mut self, deadline: Instant) -> Option<Vec<u8>> {
        loop {
            if let Ok(Some(n)) = frame_len(&self.buf, 1 << 20) {
                return Some(self.buf.drain(..n).collect());
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            self.sock.set_read_timeout(Some(deadline - now)).unwrap();
            let mut chunk = [0u8; 65536];
            match self.sock.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => panic!("reading: {e}"),
            }
        }
    }

    /// Messages until none comes for `quiet`; at most `limit` seconds in all.
    fn read_until_quiet(&mut self, quiet: Duration, limit: Duration) -> Vec<Vec<u8>> {
        let end = Instant::now() + limit;
        let mut got = Vec::new();
        while let Some(m) = self.next((Instant::now() + quiet).min(end)) {
            got.push(m);
        }
        got
    }
}

fn contains(m: &[u8], s: &str) -> bool {
    m.windows(s.len()).any(|w| w == s.as_bytes())
}

fn show(m: &[u8]) -> String {
    String::from_utf8_lossy(m).replace('\x01', "|")
}

/// The well-behaved session: an order goes out and its echo comes back within
/// `within` (the acceptor is not frozen by the other session's peer).
fn assert_echoes(good: &mut Client, id: u64, within: Duration) {
    let order = good.order(id);
    good.sock.write_all(&order).unwrap();
    let want = format!("\x0111=O{id}\x01");
    let deadline = Instant::now() + within;
    while let Some(m) = good.next(deadline) {
        if contains(&m, "\x0135=D\x01") && contains(&m, &want) {
            return;
        }
    }
    panic!("the good session's order O{id} was not echoed within {within:?}");
}

/// The acceptor of [`acceptor_cfg`] in a fresh directory `name`, ready; returns the
/// directory's guard (bind it before the peer, so the acceptor exits before it is
/// removed), the acceptor and its port.
fn start(name: &str) -> (tempfile::TempDir, Peer, u16) {
    let dir = temp_dir(name);
    let port = free_port();
    let cfg = acceptor_cfg(dir.path(), port);
    let mut venue = Peer::spawn(
        "tickwire acceptor",
        std::process::Command::new(fix_support::BIN)
            .args(["fix", "acceptor", "--app", "echo", "--no-out", "--config"])
            .arg(&cfg)
            .env("TICKWIRE_LOG", "warn"),
    );
    venue.wait(&["READY acceptor"]);
    (dir, venue, port)
}

#[test]
fn a_peer_that_never_reads_the_echoes_stops_being_read() {
    let (_dir, venue, port) = start("hostile-noread");
    let mut good = Client::logon(port, "GOOD", 30);
    let mut attacker = Client::logon(port, "ATTACK", 30);
    let rss_before = venue.rss_kib();
    // Up to 64 MB of orders, never reading the echoes: each write waits at most 0.2 s.
    attacker
        .sock
        .set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let (mut sent, mut stuck, mut id) = (0usize, 0, 0u64);
    let started = Instant::now();
    while sent < 64 << 20 && stuck < 10 && started.elapsed() < Duration::from_secs(60) {
        let batch: Vec<u8> = (0..1000)
            .flat_map(|_| {
                id += 1;
                attacker.order(id)
            })
            .collect();
        let mut at = 0;
        while at < batch.len() {
            match attacker.sock.write(&batch[at..]) {
                Ok(n) => at += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    stuck += 1;
                    if stuck >= 10 {
                        break;
                    }
                }
                Err(e) => panic!("the acceptor closed the connection: {e}"),
            }
        }
        sent += at;
    }
    // The acceptor stopped reading: what the attacker got in is the kernel's buffers
    // and the 4 MiB of answers the acceptor holds, not 64 MB.
    assert!(
        stuck >= 10,
        "sent {sent} bytes and the acceptor still read them all"
    );
    assert!(
        sent < 40 << 20,
        "the acceptor read {sent} bytes without being read"
    );
    let grown = venue.rss_kib().saturating_sub(rss_before);
    assert!(
        grown < 48 << 10,
        "the acceptor grew by {grown} KiB for {sent} bytes sent"
    );
    assert_echoes(&mut good, 1, Duration::from_secs(10));
}

#[test]
fn a_flood_of_resend_requests_is_answered_a_step_at_a_time() {
    let (_dir, venue, port) = start("hostile-resend");
    let mut good = Client::logon(port, "GOOD", 30);
    let mut attacker = Client::logon(port, "ATTACK", 30);
    // A history of 1,500 echoed orders, read.
    let orders: Vec<u8> = (1..=1500).flat_map(|i| attacker.order(i)).collect();
    attacker.sock.write_all(&orders).unwrap();
    let echoed = attacker.read_until_quiet(Duration::from_secs(2), Duration::from_secs(60));
    assert_eq!(echoed.len(), 1500);
    // 1,000 ResendRequests for all of it (88 kB), not read for now.
    let requests: Vec<u8> = (0..1000)
        .flat_map(|_| attacker.msg(b"2", &[(7, "1"), (16, "0")]))
        .collect();
    attacker.sock.write_all(&requests).unwrap();
    // The other session is answered meanwhile (each step is at most 1,024 messages).
    assert_echoes(&mut good, 1, Duration::from_secs(5));
    assert_echoes(&mut good, 2, Duration::from_secs(5));
    // Now read: the first request and eight waiting ones are answered, not 1,000.
    let got = attacker.read_until_quiet(Duration::from_secs(3), Duration::from_secs(120));
    let resent = got
        .iter()
        .filter(|m| contains(m, "\x0135=D\x01") && contains(m, "\x0143=Y\x01"))
        .count();
    assert_eq!(resent, 9 * 1500, "{} messages read", got.len());
    assert!(
        venue.rss_kib() < 200 << 10,
        "the acceptor holds {} KiB",
        venue.rss_kib()
    );
    assert_echoes(&mut attacker, 2000, Duration::from_secs(10));
}

/// How a connection that the test never wrote to ended.
#[derive(Debug, PartialEq, Eq)]
enum Silent {
    /// The acceptor closed it (EOF or reset).
    Closed,
    /// Nothing arrived and it was still open at the deadline.
    StillOpen,
}

/// Reads `sock` until it is closed or `deadline` passes (a close is not a timeout).
fn closed_by(sock: &mut TcpStream, deadline: Instant) -> Silent {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Silent::StillOpen;
        }
        sock.set_read_timeout(Some(deadline - now)).unwrap();
        let mut chunk = [0u8; 4096];
        match sock.read(&mut chunk) {
            Ok(0) => return Silent::Closed,
            Ok(n) => panic!("a silent connection got {n} bytes"),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Silent::Closed,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading: {e}"),
        }
    }
}

/// Probe F4: 64 connections that never send a byte (TickwireMaxPendingConnections)
/// made the acceptor close every new connection at once for the 10 s each was kept, so
/// a real counterparty could not log on (0 of 30 tries in 15 s). Now a connection
/// accepted at the cap evicts the one that has waited longest for its Logon: with 70
/// silent connections held, GOOD logs on at its first try; the 7 oldest silent
/// connections were closed (6 for the 65th to 70th, one for GOOD), and the 8th is still
/// open, not timed out (it then logs on as ATTACK).
#[test]
fn silent_connections_at_the_pending_cap_do_not_lock_out_a_logon() {
    let (_dir, _venue, port) = start("hostile-pending");
    let mut silent: Vec<TcpStream> = (0..70)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    // Refused at once, this panics with "no Logon answer".
    let mut good = Client::logon(port, "GOOD", 30);
    assert_echoes(&mut good, 1, Duration::from_secs(10));
    // The acceptor's Logon timeout for a silent connection is 10 s: closes well before
    // it are evictions, and the 8th oldest must still be open.
    for (i, s) in silent.iter_mut().enumerate().take(7) {
        assert_eq!(
            closed_by(s, Instant::now() + Duration::from_secs(8)),
            Silent::Closed,
            "silent connection {i} (of the 7 oldest) was not evicted"
        );
    }
    let eighth = silent.swap_remove(7);
    let mut enc = Encoder::new("FIX.4.4");
    enc.set_header_fields(&[(49, b"ATTACK"), (56, b"VENUE")]);
    let mut attacker = Client {
        sock: eighth,
        enc,
        seq: 1,
        buf: Vec::new(),
    };
    let logon = attacker.msg(b"A", &[(98, "0"), (108, "30")]);
    attacker.sock.write_all(&logon).unwrap();
    let reply = attacker
        .next(Instant::now() + Duration::from_secs(30))
        .expect("the 8th oldest silent connection was closed: no Logon answer");
    assert!(contains(&reply, "\x0135=A\x01"), "{}", show(&reply));
}

/// Hostile-input pass: a connection sending bytes that are not FIX (skipped, as
/// QuickFIX skips them) was closed after 1 s without a line for the operator. Now the
/// close is logged with the peer and what it sent, and counted; a silent connection's
/// close after 10 s is too (its line comes later, the count says both).
#[test]
fn a_connection_sending_garbage_is_closed_and_logged() {
    let (_dir, venue, port) = start("hostile-garbage");
    let mut junk = TcpStream::connect(("127.0.0.1", port)).unwrap();
    junk.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(
        closed_by(&mut junk, Instant::now() + Duration::from_secs(8)),
        Silent::Closed,
        "a connection that sent no FIX was not closed within 8 s"
    );
    let line = venue.wait_ever(&["stderr: ", "connection from 127.0.0.1 closed"]);
    assert!(
        line.contains("none of the bytes began a FIX message") && line.contains("1 closed without"),
        "{line}"
    );
    // The same with an unfinished first message: its size is said.
    let mut half = TcpStream::connect(("127.0.0.1", port)).unwrap();
    half.write_all(b"8=FIX.4.4\x019=500\x0135=A\x01").unwrap();
    assert_eq!(
        closed_by(&mut half, Instant::now() + Duration::from_secs(8)),
        Silent::Closed,
        "an unfinished first message was not closed within 8 s"
    );
    // Logged at most once a second: the second close is at least 1 s after the first.
    let line = venue.wait_ever(&["stderr: ", "2 closed without a Logon"]);
    assert!(line.contains("bytes unfinished"), "{line}");
}

/// A child process killed (by PID) and reaped on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Probe F5: the engine thread wrote its IN/OUT/EVENT lines to standard output itself,
/// so with stdout a pipe nobody reads (`| less`, a stuck log shipper) a peer sending
/// 4,000 orders froze the whole engine: another counterparty could not log on. Here
/// the acceptor's stdout is a pipe the test reads only the READY line of, while
/// ATTACK sends 20,000 orders (about 9 MB of IN and OUT lines, beyond the 4 MiB queue
/// and the pipe): every order is echoed, GOOD then logs on and gets its order echoed,
/// and once the test reads the pipe a DROPPED line counts what did not fit.
#[test]
fn a_standard_output_nobody_reads_does_not_freeze_the_engine() {
    use std::io::BufRead;
    let dir = temp_dir("hostile-stdout");
    let port = free_port();
    let cfg = acceptor_cfg(dir.path(), port);
    let mut child = Killed(
        std::process::Command::new(fix_support::BIN)
            .args(["fix", "acceptor", "--app", "echo", "--config"])
            .arg(&cfg)
            .env("TICKWIRE_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut stdout = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut ready = String::new();
    stdout.read_line(&mut ready).unwrap();
    assert!(ready.starts_with("READY acceptor"), "{ready}");

    let mut attacker = Client::logon(port, "ATTACK", 30);
    let mut id = 0u64;
    for batch in 0..20 {
        let orders: Vec<u8> = (0..1000)
            .flat_map(|_| {
                id += 1;
                attacker.order(id)
            })
            .collect();
        attacker.sock.write_all(&orders).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut echoed = 0;
        while echoed < 1000 {
            let m = attacker.next(deadline).unwrap_or_else(|| {
                panic!("batch {batch}: {echoed} of 1000 orders echoed in 30 s (engine frozen?)")
            });
            echoed += usize::from(contains(&m, "\x0135=D\x01"));
        }
    }
    // Refused or frozen, this panics with "no Logon answer".
    let mut good = Client::logon(port, "GOOD", 30);
    assert_echoes(&mut good, 1, Duration::from_secs(30));

    // Reading the pipe now: what was queued, then the count of what was not.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let dropped = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with("DROPPED ") => break line,
            Ok(_) => {}
            Err(e) => panic!("no DROPPED line once the pipe was read: {e}"),
        }
    };
    assert!(
        dropped.ends_with(" lines: standard output was not being read"),
        "{dropped}"
    );
    let n: u64 = dropped.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(n > 0, "{dropped}");
}
