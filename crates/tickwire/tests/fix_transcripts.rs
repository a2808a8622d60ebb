//! Issue 18: QuickFIX/C++'s recorded behaviour, replayed against the real
//! `tickwire fix acceptor --app echo` over TCP on 127.0.0.1.
//!
//! Each scenario is a transcript in `crates/fix/testdata/quickfix/`, recorded by
//! `tools/quickfix/probe.py` against a real QuickFIX/C++ (`qf_peer --app at`, QuickFIX's
//! acceptance-test application). The test starts a fresh tickwire acceptor with the
//! probe's settings (sessions `FIX.4.4`, `FIX.4.2`, `FIX.4.0` and `FIXT.1.1` `QF` ← `PROBE`, the standard
//! dictionaries, `ValidateUserDefinedFields=Y`), sends the probe's bytes again (52 and
//! 122 moved to now by the same amount, so offsets between them are kept; 9 and 10
//! recomputed, or kept wrong by the same amount when the probe sent them wrong) and
//! requires what QuickFIX sent: the same messages, field by field in the same order
//! (values of 9, 10, 52 and 122 aside), nothing more while QuickFIX stayed quiet, and
//! the disconnects where QuickFIX disconnected.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fix_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fix_support::{free_port, repo_root, spec_dir, temp_dir, Peer};
use tickwire_fix::codec::{format_utc_timestamp, parse_utc_timestamp, TimestampPrecision};

const SOH: u8 = 0x01;

/// How long an expected message may take (debug build on a busy 2-core machine).
const EXPECT_WAIT: Duration = Duration::from_secs(10);

/// One line of a transcript.
enum Step {
    /// `>> ` bytes the probe sent.
    Send(Vec<u8>),
    /// `<< ` bytes QuickFIX sent.
    Expect(String),
    /// `-- disconnected by QuickFIX`, within this long.
    Disconnected(Duration),
    /// `-- quiet for Ns`: nothing more for this long.
    Quiet(Duration),
    /// `-- probe closed the connection`.
    Close,
}

fn steps(text: &str) -> Vec<Step> {
    let mut out = Vec::new();
    // "# t=+1.00s" before a disconnect: QuickFIX took that long; allow twice as much
    // (at least 3 s). Without a stamp: 5 s.
    let mut stamp: Option<Duration> = None;
    for line in text.lines() {
        if let Some(m) = line.strip_prefix(">> ") {
            out.push(Step::Send(m.replace('|', "\x01").into_bytes()));
        } else if let Some(m) = line.strip_prefix("<< ") {
            out.push(Step::Expect(m.to_string()));
        } else if line.starts_with("-- disconnected") {
            let limit = stamp
                .map(|t| (t * 2).max(Duration::from_secs(3)))
                .unwrap_or(Duration::from_secs(5));
            out.push(Step::Disconnected(limit));
        } else if let Some(q) = line
            .strip_prefix("-- quiet for ")
            .or_else(|| line.strip_prefix("-- stopped after "))
        {
            let secs: f64 = q.trim_end_matches('s').parse().unwrap();
            out.push(Step::Quiet(Duration::from_secs_f64(secs.min(1.0))));
        } else if line.starts_with("-- probe closed") {
            out.push(Step::Close);
        } else if let Some(t) = line.strip_prefix("# t=+") {
            let secs: f64 = t.trim_end_matches('s').parse().unwrap();
            stamp = Some(Duration::from_secs_f64(secs));
        }
    }
    out
}

/// The first SendingTime the probe sent (the transcript's "then").
fn first_sending_time(steps: &[Step]) -> u64 {
    steps
        .iter()
        .find_map(|s| match s {
            Step::Send(m) => fields(m)
                .into_iter()
                .find(|(t, _)| t == "52")
                .and_then(|(_, v)| parse_utc_timestamp(v?.as_bytes())),
            _ => None,
        })
        .expect("a SendingTime in the transcript")
}

/// The fields of a message; a value of None is a field without '='.
fn fields(raw: &[u8]) -> Vec<(String, Option<String>)> {
    String::from_utf8_lossy(raw)
        .split('\x01')
        .filter(|f| !f.is_empty())
        .map(|f| match f.split_once('=') {
            Some((t, v)) => (t.to_string(), Some(v.to_string())),
            None => (f.to_string(), None),
        })
        .collect()
}

/// The recorded message again, with 52/122 moved by `shift` nanoseconds and 9/10 as
/// right (or as wrong) as they were.
fn refresh(recorded: &[u8], shift: u64) -> Vec<u8> {
    let fs = fields(recorded);
    let body_of = |fs: &[(String, Option<String>)]| -> Vec<u8> {
        let mut b = Vec::new();
        for (t, v) in fs.iter().skip(2) {
            if t == "10" {
                break;
            }
            // A field without '=' (recorded on purpose) stays without one.
            if v.is_none() {
                b.extend_from_slice(format!("{t}\x01").as_bytes());
            } else {
                b.extend_from_slice(format!("{t}={}\x01", v.as_deref().unwrap_or("")).as_bytes());
            }
        }
        b
    };
    let rec_len = body_of(&fs).len() as i64;
    let rec_9: i64 = fs[1].1.as_deref().unwrap().parse().unwrap();
    let rec_10 = fs.last().and_then(|(_, v)| v.clone()).unwrap_or_default();
    let rec_sum = {
        let upto = recorded.len() - (rec_10.len() + 4);
        u32::from(recorded[..upto].iter().fold(0u8, |a, b| a.wrapping_add(*b)))
    };
    let cks_right = rec_10.parse::<u32>().ok() == Some(rec_sum);
    let moved: Vec<(String, Option<String>)> = fs
        .into_iter()
        .map(|(t, v)| {
            if t == "52" || t == "122" {
                if let Some(ns) = v.as_deref().and_then(|v| parse_utc_timestamp(v.as_bytes())) {
                    let mut b = [0u8; 27];
                    let n = format_utc_timestamp(&mut b, ns + shift, TimestampPrecision::Millis);
                    return (t, Some(String::from_utf8_lossy(&b[..n]).into_owned()));
                }
            }
            (t, v)
        })
        .collect();
    let body = body_of(&moved);
    let len = body.len() as i64 + (rec_9 - rec_len);
    let mut out = format!("8={}\x019={len}\x01", moved[0].1.as_deref().unwrap_or("")).into_bytes();
    out.extend_from_slice(&body);
    let sum = out.iter().fold(0u8, |a, b| a.wrapping_add(*b));
    if cks_right {
        out.extend_from_slice(format!("10={sum:03}\x01").as_bytes());
    } else {
        out.extend_from_slice(format!("10={rec_10}\x01").as_bytes());
    }
    out
}

/// A message with the values that vary from run to run blanked.
fn normalized(m: &str) -> Vec<String> {
    m.split(['|', '\x01'])
        .filter(|f| !f.is_empty())
        .map(|f| match f.split_once('=') {
            Some((t, _)) if matches!(t, "9" | "10" | "52" | "122") => format!("{t}=*"),
            _ => f.to_string(),
        })
        .collect()
}

/// The probe's side of the connection: a byte buffer split into FIX frames the way
/// probe.py splits them.
struct Wire {
    sock: TcpStream,
    buf: Vec<u8>,
    closed: bool,
}

impl Wire {
    /// The next complete frame, or None at `deadline` or when the peer closed.
    fn next(&mut self, deadline: Instant) -> Option<Vec<u8>> {
        loop {
            if let Some(n) = frame(&self.buf) {
                return Some(self.buf.drain(..n).collect());
            }
            if self.closed {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            self.sock.set_read_timeout(Some(deadline - now)).unwrap();
            let mut chunk = [0u8; 65536];
            match self.sock.read(&mut chunk) {
                Ok(0) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => self.closed = true,
            }
        }
    }
}

fn frame(buf: &[u8]) -> Option<usize> {
    let p9 = buf.windows(3).position(|w| w == b"\x019=")?;
    let end9 = p9 + 1 + buf[p9 + 1..].iter().position(|&b| b == SOH)?;
    let len: usize = std::str::from_utf8(&buf[p9 + 3..end9]).ok()?.parse().ok()?;
    let body_end = end9 + 1 + len;
    let tail = buf.get(body_end..)?;
    Some(body_end + tail.iter().position(|&b| b == SOH)? + 1)
}

fn acceptor_cfg(dir: &Path, port: u16) -> std::path::PathBuf {
    let spec = spec_dir();
    let text = format!(
        "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptHost=127.0.0.1\n\
         SocketAcceptPort={port}\nStartTime=00:00:00\nEndTime=00:00:00\n\
         UseDataDictionary=Y\nValidateUserDefinedFields=Y\nFileStorePath={d}/store\n\n\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID=QF\nTargetCompID=PROBE\n\
         DataDictionary={s}/FIX44.xml\n\n\
         [SESSION]\nBeginString=FIX.4.2\nSenderCompID=QF\nTargetCompID=PROBE\n\
         DataDictionary={s}/FIX42.xml\n\n\
         [SESSION]\nBeginString=FIX.4.0\nSenderCompID=QF\nTargetCompID=PROBE\n\
         DataDictionary={s}/FIX40.xml\n\n\
         [SESSION]\nBeginString=FIXT.1.1\nSenderCompID=QF\nTargetCompID=PROBE\n\
         DefaultApplVerID=FIX.5.0\nTransportDataDictionary={s}/FIXT11.xml\n\
         AppDataDictionary={s}/FIX50.xml\nAppDataDictionary.FIX.5.0SP2={s}/FIX50SP2.xml\n",
        d = dir.display(),
        s = spec.display()
    );
    let p = dir.join("acceptor.cfg");
    std::fs::write(&p, text).unwrap();
    p
}

fn now_nanos() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    )
    .unwrap()
}

/// Replays `scenario` against a fresh `tickwire fix acceptor --app echo`.
fn replay(scenario: &str) {
    let path = repo_root()
        .join("crates/fix/testdata/quickfix")
        .join(format!("{scenario}.txt"));
    let text = std::fs::read_to_string(&path).unwrap();
    let steps = steps(&text);
    let dir = temp_dir(&format!("transcript-{scenario}"));
    let port = free_port();
    let cfg = acceptor_cfg(dir.path(), port);
    let mut acceptor = Peer::tickwire("tickwire acceptor", "acceptor", &cfg, "echo");
    acceptor.wait(&["READY acceptor"]);
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_nodelay(true).unwrap();
    let mut wire = Wire {
        sock,
        buf: Vec::new(),
        closed: false,
    };
    let shift = now_nanos().saturating_sub(first_sending_time(&steps));
    let mut log = String::new();
    for step in &steps {
        match step {
            Step::Send(recorded) => {
                let m = refresh(recorded, shift);
                log.push_str(&format!(
                    ">> {}\n",
                    String::from_utf8_lossy(&m).replace('\x01', "|")
                ));
                // A write after tickwire closed is the disconnect step's business.
                let _ = wire.sock.write_all(&m);
            }
            Step::Expect(want) => {
                let got = wire.next(Instant::now() + EXPECT_WAIT);
                let got = got.map(|g| String::from_utf8_lossy(&g).replace('\x01', "|"));
                assert_eq!(
                    got.as_deref().map(normalized),
                    Some(normalized(want)),
                    "{scenario}: expected QuickFIX's\n<< {want}\ngot\n<< {got:?}\n\
                     after:\n{log}\nacceptor output:\n{}",
                    acceptor.output()
                );
                log.push_str(&format!("<< {}\n", got.unwrap()));
            }
            Step::Quiet(d) => {
                let extra = wire.next(Instant::now() + *d);
                assert!(
                    extra.is_none(),
                    "{scenario}: QuickFIX stayed quiet, tickwire sent\n<< {}\nafter:\n{log}",
                    String::from_utf8_lossy(&extra.unwrap()).replace('\x01', "|")
                );
                if wire.closed {
                    panic!(
                        "{scenario}: QuickFIX stayed connected, tickwire disconnected after:\n{log}\
                         \nacceptor output:\n{}",
                        acceptor.output()
                    );
                }
            }
            Step::Disconnected(limit) => {
                let extra = wire.next(Instant::now() + *limit);
                assert!(
                    extra.is_none(),
                    "{scenario}: QuickFIX disconnected, tickwire sent\n<< {}\nafter:\n{log}",
                    String::from_utf8_lossy(&extra.unwrap()).replace('\x01', "|")
                );
                assert!(
                    wire.closed,
                    "{scenario}: QuickFIX disconnected, tickwire kept the connection open \
                     for {limit:?} after:\n{log}\nacceptor output:\n{}",
                    acceptor.output()
                );
            }
            Step::Close => break,
        }
    }
    drop(wire);
    let _ = acceptor.terminate();
}

macro_rules! transcripts {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                replay(stringify!($name));
            }
        )*
    };
}

transcripts! {
    /// Class 1: a parsed message sent back comes out in QuickFIX's field order.
    at_echo_field_order,
    /// Class 1: repeating groups (nested, empty) in dictionary order.
    at_echo_groups,
    /// Class 1 on FIX.4.2.
    at_echo_field_order_fix42,
    /// Class 1 on FIX.4.0 (SendingTime in seconds).
    at_echo_field_order_fix40,
    /// Class 2: rejects carry the reversed routing fields.
    reverse_route,
    /// Class 2: present-but-empty routing fields are rejected, not reversed.
    reverse_route_empty,
    /// Class 2 on FIX.4.0: no LocationIDs (144/145 are invalid tags there).
    reverse_route_fix40,
    /// Class 3: an invalid tag number is a session Reject with reason 0.
    invalid_tag_number,
    /// Class 3 on FIX.4.2.
    invalid_tag_number_fix42,
    /// Class 4: PossResend=Y of an order already seen: the application ignores it.
    possresend_seen,
    /// Class 4: PossResend=Y of a new order: delivered and echoed with 97.
    possresend_not_seen,
    /// Class 5: BodyLength too short or too long, and the sequence numbers after it.
    body_length_wrong,
    /// Class 6: a Logon with a BodyLength too short ends the connection at once.
    logon_body_length_short,
    /// Class 6: a Logon with a BodyLength too long ends the connection after 1 s.
    logon_body_length_long,
    /// Class 6: ... and swallows the Logon that follows it.
    logon_body_length_long_then_logon,
    /// Class 7: empty values in the header, the body and a group.
    empty_values,
    /// Class 7: a Logon with an empty HeartBtInt.
    logon_empty_value,
    /// Neighbours of 3 and 7: a leading-zero tag, a bare tag, 52=, a tag that wraps.
    neighbour_tag_forms,
    /// Neighbour of 7 (validation): FIXT application messages are validated with the
    /// dictionary of their ApplVerID (1128); the echo keeps 1128.
    fixt_appl_ver_id,
    /// ... and, without 1128, of the DefaultApplVerID of the counterparty's Logon.
    fixt_logon_default_appl_ver_id,
}
