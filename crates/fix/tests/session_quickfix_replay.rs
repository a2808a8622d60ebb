//! Replays the transcripts recorded against a real QuickFIX (acceptor and initiator)
//! (`crates/fix/testdata/quickfix/*.txt`, see docs/fix/quickfix-behaviour.md) through our
//! session configured like QuickFIX was (FIX44.xml/FIX42.xml validation,
//! defaults otherwise), and checks that we send the same messages, in the same order,
//! and disconnect at the same points.
//!
//! Comparison ignores BodyLength (9), CheckSum (10), SendingTime (52) and
//! OrigSendingTime (122) values. The clock follows the transcript: each probe message's
//! SendingTime (unless deliberately far off), `# t=+N` marks (relative to the logon) and
//! `-- quiet for Ns`. The application is emulated from the transcript: when QuickFIX's
//! echo application answered a message, ours sends the same body; when it threw
//! `UnsupportedMessageType`, ours calls `reject_unsupported`; when QuickFIX was stopped,
//! ours calls `logout`.

// A test reports what it replayed (visible with --nocapture): tests may print.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_harness;
#[path = "support/spec.rs"]
mod spec;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tickwire_rt::UtcNanos;

use session_harness::{pretty, strip};
use tickwire_fix::codec::{self, parse_utc_timestamp};
use tickwire_fix::dict::Dictionary;
use tickwire_fix::session::{Event, Output, Role, Session, SessionConfig, Validation};
use tickwire_fix::store::MemoryStore;
use tickwire_fix::validate::ValidationOptions;

/// Scenarios outside the session core, with the reason.
const SKIP: &[(&str, &str)] = &[
    (
        "algo_tick_to_trade",
        "application benchmark, not a session rule",
    ),
    ("echo_order_fix44", "application echo rules"),
    (
        "duplicate_logon",
        "second connection: the acceptor driver refuses it",
    ),
    (
        "logon_wrong_beginstring",
        "session lookup: the acceptor driver refuses it",
    ),
    (
        "logon_wrong_sender_compid",
        "session lookup: the acceptor driver refuses it",
    ),
    (
        "logon_wrong_target_compid",
        "session lookup: the acceptor driver refuses it",
    ),
    (
        "first_message_not_logon",
        "session lookup: the acceptor driver refuses it",
    ),
    (
        "first_message_not_logon_app",
        "session lookup: the acceptor driver refuses it",
    ),
    (
        "logon_body_length_long",
        "an incomplete first message is closed after 1 s by the acceptor driver",
    ),
];

/// Scenarios whose first probe message has a deliberately wrong SendingTime: the real
/// clock relative to it, in seconds (from the scenario's description line).
const CLOCK_OFFSET: &[(&str, i64)] = &[("sending_time_off_logon", -300)];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/quickfix")
}

/// `8=..|9=..|...` with 9, 10 dropped and 52, 122 values masked.
fn normalize(msg: &str) -> String {
    msg.split('|')
        .filter(|f| !f.is_empty() && !f.starts_with("9=") && !f.starts_with("10="))
        .map(|f| {
            if f.starts_with("52=") {
                "52=*".to_owned()
            } else if f.starts_with("122=") {
                "122=*".to_owned()
            } else {
                f.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("|")
}

fn field<'a>(msg: &'a str, tag: &str) -> Option<&'a str> {
    msg.split('|')
        .find_map(|f| f.strip_prefix(tag).and_then(|v| v.strip_prefix('=')))
}

/// The body of a recorded message: the fields after 56 up to 10.
fn body_after_header(msg: &str) -> String {
    let mut out = String::new();
    let mut in_body = false;
    for f in msg.split('|').filter(|f| !f.is_empty()) {
        if f.starts_with("10=") {
            break;
        }
        if in_body {
            out.push_str(f);
            out.push('\x01');
        }
        if f.starts_with("56=") {
            in_body = true;
        }
    }
    out
}

enum Pending {
    Send(String),
    Disconnect,
}

struct Replay {
    s: Session<MemoryStore>,
    now: u64,
    pending: VecDeque<Pending>,
    /// MsgSeqNum and MsgType of application messages delivered to the application.
    delivered: VecDeque<(u64, String)>,
    stream: Vec<u8>,
}

impl Replay {
    fn drain(&mut self) {
        while let Some(o) = self.s.poll_event() {
            match o {
                Output::Send(b) => self.pending.push_back(Pending::Send(pretty(b))),
                Output::Disconnect => self.pending.push_back(Pending::Disconnect),
                Output::Event(Event::FromApp(raw)) => {
                    let mut fields = codec::Fields::default();
                    let m = codec::parse_keeping_empty(raw, &mut fields, true)
                        .expect("delivered message parses");
                    let mt = String::from_utf8_lossy(m.msg_type()).into_owned();
                    self.delivered.push_back((m.seq_num().unwrap_or(0), mt));
                }
                _ => {}
            }
        }
    }

    /// Feeds bytes as a driver does: frames with `frame_len`, skipping garbage.
    fn feed(&mut self, bytes: &[u8]) {
        self.stream.extend_from_slice(bytes);
        loop {
            match codec::frame_len(&self.stream, 1 << 20) {
                Ok(Some(n)) => {
                    let frame: Vec<u8> = self.stream.drain(..n).collect();
                    self.s.handle_message(UtcNanos(self.now), &frame);
                    self.drain();
                }
                Ok(None) => break,
                Err(e) => {
                    let skip = e.skip().min(self.stream.len());
                    self.stream.drain(..skip);
                }
            }
        }
    }

    fn timer(&mut self, at: u64) {
        self.now = self.now.max(at);
        self.s.handle_timeout(UtcNanos(self.now));
        self.drain();
    }
}

fn replay(path: &Path, dicts: &[(String, Arc<Dictionary>)]) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let lines: Vec<&str> = text.lines().collect();
    // The first message decides the role: QuickFIX's own Logon first means QuickFIX
    // was the initiator (HeartBtInt and ResetOnLogon as its Logon shows).
    let (initiator, first) = lines
        .iter()
        .find_map(|l| {
            l.strip_prefix(">> ")
                .map(|m| (false, m))
                .or_else(|| l.strip_prefix("<< ").map(|m| (true, m)))
        })
        .ok_or("no message")?;
    let begin = field(first, "8").ok_or("no 8")?;
    let name = path.file_stem().unwrap_or_default().to_string_lossy();
    let offset = CLOCK_OFFSET
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |&(_, o)| o);
    let first_52 =
        parse_utc_timestamp(field(first, "52").ok_or("no 52")?.as_bytes()).ok_or("bad 52")?;
    let logon_time = first_52.saturating_add_signed(offset * 1_000_000_000);
    let dict = |name: &str| {
        dicts
            .iter()
            .find(|(b, _)| b == name)
            .map(|(_, d)| d.clone())
            .ok_or_else(|| format!("no dictionary for {name}"))
    };
    let options = ValidationOptions::default();
    // As probe.py's acceptor: FIXT.1.1 with FIX.5.0 as DefaultApplVerID and
    // AppDataDictionary, SP2 under AppDataDictionary.FIX.5.0SP2.
    let validation = if begin == "FIXT.1.1" {
        Validation::fixt(dict("FIXT11")?, dict("FIX50")?, options)
            .with_app_for("FIX.5.0", dict("FIX50")?)
            .with_app_for("FIX.5.0SP2", dict("FIX50SP2")?)
    } else {
        Validation::single(dict(begin)?, options)
    };
    let role = if initiator {
        Role::Initiator
    } else {
        Role::Acceptor
    };
    let mut cfg = SessionConfig::new(begin, "QF", "PROBE", role);
    // The FIXT transcripts are `qf_peer --app at`'s, whose application (as QuickFIX's
    // acceptance-test one) takes the Logon's DefaultApplVerID as the session's.
    cfg.adopt_counterparty_default_appl_ver_id = begin == "FIXT.1.1";
    if initiator {
        cfg.heart_bt_int = field(first, "108")
            .and_then(|v| v.parse().ok())
            .unwrap_or(30);
        cfg.reset_on_logon = field(first, "141") == Some("Y");
    }
    let s = Session::new(cfg, MemoryStore::new(logon_time))
        .map_err(|e| e.to_string())?
        .with_validation(validation);
    let mut compared = 0;
    let mut r = Replay {
        s,
        now: logon_time,
        pending: VecDeque::new(),
        delivered: VecDeque::new(),
        stream: Vec::new(),
    };
    r.s.handle_connected(UtcNanos(r.now));
    r.drain();
    for (i, line) in lines.iter().enumerate() {
        let at = |what: &str| format!("line {}: {what}", i + 1);
        if let Some(msg) = line.strip_prefix(">> ") {
            if let Some(t) = field(msg, "52").and_then(|v| parse_utc_timestamp(v.as_bytes())) {
                if t > r.now && t - r.now < 60_000_000_000 {
                    r.now = t;
                }
            }
            r.feed(msg.replace('|', "\x01").as_bytes());
        } else if let Some(expected) = line.strip_prefix("<< ") {
            let mt = field(expected, "35").unwrap_or("");
            let is_app = !matches!(mt, "0" | "1" | "2" | "3" | "4" | "5" | "A");
            if r.pending.is_empty() && is_app {
                // QuickFIX's application answered the last delivered message.
                let (seq, ref_mt) = r
                    .delivered
                    .pop_front()
                    .ok_or_else(|| at("application answer without a delivered message"))?;
                if mt == "j" && field(expected, "380") == Some("3") {
                    r.s.reject_unsupported(UtcNanos(r.now), seq, ref_mt.as_bytes())
                        .map_err(|e| at(&e.to_string()))?;
                } else {
                    let body = body_after_header(expected);
                    r.s.send_app(UtcNanos(r.now), mt.as_bytes(), body.as_bytes())
                        .map_err(|e| at(&e.to_string()))?;
                }
                r.drain();
            }
            if r.pending.is_empty() && mt == "5" {
                // QuickFIX was stopped: it logged out.
                r.s.logout(UtcNanos(r.now), None);
                r.drain();
            }
            match r.pending.pop_front() {
                Some(Pending::Send(ours)) => {
                    compared += 1;
                    strip(ours.replace('|', "\x01").as_bytes());
                    if normalize(&ours) != normalize(expected) {
                        return Err(at(&format!(
                            "QuickFIX sent\n    {}\nwe sent\n    {}",
                            normalize(expected),
                            normalize(&ours)
                        )));
                    }
                }
                Some(Pending::Disconnect) => {
                    return Err(at(&format!(
                        "QuickFIX sent {} but we disconnected",
                        normalize(expected)
                    )))
                }
                None => {
                    return Err(at(&format!(
                        "QuickFIX sent {} but we sent nothing",
                        normalize(expected)
                    )))
                }
            }
        } else if let Some(rest) = line.strip_prefix("# t=+") {
            let secs: f64 = rest
                .trim_end_matches('s')
                .parse()
                .map_err(|_| at("bad t="))?;
            r.timer(logon_time + (secs * 1e9) as u64);
        } else if let Some(rest) = line.strip_prefix("-- quiet for ") {
            let secs: f64 = rest
                .trim_end_matches('s')
                .parse()
                .map_err(|_| at("bad quiet"))?;
            let until = r.now + (secs * 1e9) as u64;
            r.timer(until);
            if let Some(p) = r.pending.front() {
                let what = match p {
                    Pending::Send(m) => normalize(m),
                    Pending::Disconnect => "a disconnect".to_owned(),
                };
                return Err(at(&format!("QuickFIX was quiet but we sent {what}")));
            }
        } else if line.starts_with("-- disconnected by QuickFIX") {
            match r.pending.pop_front() {
                Some(Pending::Disconnect) => {}
                Some(Pending::Send(m)) => {
                    return Err(at(&format!(
                        "QuickFIX disconnected but we sent {}",
                        normalize(&m)
                    )))
                }
                None => return Err(at("QuickFIX disconnected but we did not")),
            }
        } else if line.starts_with("-- probe closed") {
            break;
        }
    }
    if let Some(Pending::Send(m)) = r.pending.front() {
        return Err(format!("at the end we still sent {}", normalize(m)));
    }
    Ok(compared)
}

#[test]
fn quickfix_transcripts_replay_identically() {
    let spec = spec::spec_dir();
    let dicts: Vec<(String, Arc<Dictionary>)> = [
        ("FIX.4.4", "FIX44.xml"),
        ("FIX.4.2", "FIX42.xml"),
        ("FIX.4.0", "FIX40.xml"),
        ("FIXT11", "FIXT11.xml"),
        ("FIX50", "FIX50.xml"),
        ("FIX50SP2", "FIX50SP2.xml"),
    ]
    .iter()
    .map(|(b, f)| {
        let d = Dictionary::from_file(spec.join(f)).expect("dictionary");
        (b.to_string(), Arc::new(d))
    })
    .collect();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("testdata/quickfix")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    paths.sort();
    let mut failures = Vec::new();
    let mut replayed = 0;
    let mut compared = 0;
    for p in &paths {
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if SKIP.iter().any(|(s, _)| *s == name) {
            continue;
        }
        replayed += 1;
        match replay(p, &dicts) {
            Ok(n) => compared += n,
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(replayed >= 40, "only {replayed} transcripts found");
    assert!(compared >= 100, "only {compared} messages compared");
    println!("{replayed} transcripts, {compared} messages compared");
    assert!(
        failures.is_empty(),
        "{} of {replayed} transcripts differ:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
