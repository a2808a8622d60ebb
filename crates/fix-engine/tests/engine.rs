//! The engine over real loopback sockets: two engines talking to each other (the
//! tick-to-trade shape: a message on one session answered on another from inside the
//! callback), and hostile raw-socket clients against an acceptor (unknown session,
//! message before Logon, garbage, huge BodyLength) that must cost only their own
//! connection.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickwire_fix::codec::{self, Encoder, Fields, TimestampPrecision};
use tickwire_fix::session::{Role, SessionConfig};
use tickwire_fix::settings::Settings;
use tickwire_fix_engine::{
    now_nanos, Application, Ctx, Engine, EngineOptions, Handle, SessionKey, SessionSpec,
};

const WAIT: Duration = Duration::from_secs(20);

fn options() -> EngineOptions {
    EngineOptions {
        max_block: Duration::from_millis(5),
        max_message_len: 64 * 1024,
        ..EngineOptions::default()
    }
}

fn spec(sender: &str, target: &str, role: Role) -> SessionSpec {
    let mut cfg = SessionConfig::new("FIX.4.4", sender, target, role);
    cfg.reconnect_interval = 1;
    SessionSpec::new(cfg)
}

// ─── two engines: venue (initiator) and algo (acceptor) ──────────────────────────

/// The algo: every 35=X on the market-data session becomes a 35=D on the order
/// session, sent from inside `from_app`.
#[derive(Default)]
struct Algo {
    md: Option<SessionKey>,
    oe: Option<SessionKey>,
    orders: u32,
}

impl Application for Algo {
    fn on_create(&mut self, session: SessionKey, id: &tickwire_fix::settings::SessionId) {
        match id.sender_comp_id.as_str() {
            "ALGO_MD" => self.md = Some(session),
            "ALGO_OE" => self.oe = Some(session),
            _ => {}
        }
    }

    fn from_app(&mut self, ctx: &mut Ctx<'_>, session: SessionKey, msg: &codec::MessageRef<'_>) {
        if Some(session) != self.md || msg.msg_type() != b"X" {
            return;
        }
        let corr = msg.get(278).unwrap_or_default();
        let oe = self.oe.expect("order session");
        ctx.send_with(oe, b"D", |e| {
            e.field(11, corr);
            e.field(38, b"100");
            e.field(40, b"2");
            e.field(54, b"1");
            e.field(55, b"IBM");
        })
        .expect("order sent");
        self.orders += 1;
    }

    fn observe_outgoing(&self) -> bool {
        false
    }
}

/// The venue: sends market data once both sessions are logged on, collects orders.
#[derive(Default)]
struct Venue {
    logged_on: Vec<SessionKey>,
    orders: Arc<Mutex<Vec<String>>>,
    sent: bool,
}

impl Application for Venue {
    fn on_logon(&mut self, ctx: &mut Ctx<'_>, session: SessionKey) {
        self.logged_on.push(session);
        if self.logged_on.len() == 2 && !self.sent {
            self.sent = true;
            let md = SessionKey(0);
            for i in 0..10 {
                let corr = format!("C{i}");
                ctx.send_with(md, b"X", |e| {
                    e.field(268, b"1");
                    e.field(279, b"0");
                    e.field(269, b"0");
                    e.field(55, b"IBM");
                    e.field(270, b"10.5");
                    e.field(271, b"100");
                    e.field(278, corr.as_bytes());
                })
                .expect("market data sent");
            }
        }
    }

    fn from_app(&mut self, _ctx: &mut Ctx<'_>, _session: SessionKey, msg: &codec::MessageRef<'_>) {
        if msg.msg_type() == b"D" {
            let id = msg.get_str(11).unwrap_or_default().to_string();
            self.orders.lock().unwrap().push(id);
        }
    }
}

#[test]
fn market_data_on_one_session_turns_into_orders_on_another_from_inside_the_callback() {
    let mut md = spec("ALGO_MD", "VENUE_MD", Role::Acceptor);
    md.accept = Some("127.0.0.1:0".parse().unwrap());
    let mut oe = spec("ALGO_OE", "VENUE_OE", Role::Acceptor);
    oe.accept = Some("127.0.0.1:0".parse().unwrap());
    let mut algo = Engine::new(vec![md, oe], Algo::default(), options()).unwrap();
    let addrs = algo.listen_addrs();
    assert_eq!(addrs.len(), 1, "both sessions share one listener");
    let port = addrs[0].port();

    let mut vmd = spec("VENUE_MD", "ALGO_MD", Role::Initiator);
    vmd.connect = vec![("127.0.0.1".into(), port)];
    let mut voe = spec("VENUE_OE", "ALGO_OE", Role::Initiator);
    voe.connect = vec![("127.0.0.1".into(), port)];
    let orders = Arc::new(Mutex::new(Vec::new()));
    let venue_app = Venue {
        orders: orders.clone(),
        ..Venue::default()
    };
    let mut venue = Engine::new(vec![vmd, voe], venue_app, options()).unwrap();

    let deadline = Instant::now() + WAIT;
    while orders.lock().unwrap().len() < 10 {
        assert!(
            Instant::now() < deadline,
            "orders: {:?}",
            orders.lock().unwrap()
        );
        algo.turn().unwrap();
        venue.turn().unwrap();
    }
    let got = orders.lock().unwrap().clone();
    let want: Vec<String> = (0..10).map(|i| format!("C{i}")).collect();
    assert_eq!(
        got, want,
        "one order per tick, in order, correlation id carried"
    );
    assert_eq!(algo.app().orders, 10);
    let oe_key = algo.app().oe.unwrap();
    // Logon + 10 orders.
    assert_eq!(algo.session(oe_key).unwrap().next_sender_seq(), 12);
    venue.shutdown(Duration::from_secs(2)).unwrap();
    algo.shutdown(Duration::from_secs(2)).unwrap();
}

// ─── an acceptor against raw sockets ─────────────────────────────────────────────

/// Counts what the acceptor's application sees.
#[derive(Default, Clone)]
struct Seen {
    events: Arc<Mutex<Vec<String>>>,
}

impl Application for Seen {
    fn on_logon(&mut self, _ctx: &mut Ctx<'_>, _s: SessionKey) {
        self.events.lock().unwrap().push("logon".into());
    }
    fn from_app(&mut self, ctx: &mut Ctx<'_>, s: SessionKey, msg: &codec::MessageRef<'_>) {
        self.events
            .lock()
            .unwrap()
            .push(format!("app {}", msg.get_str(11).unwrap_or("")));
        // Echo the ClOrdID back as an ExecutionReport-ish message.
        let id = msg.get(11).unwrap_or_default().to_vec();
        ctx.send_with(s, b"8", |e| e.field(11, &id)).unwrap();
    }
    fn on_event(&mut self, _s: SessionKey, text: &str) {
        self.events.lock().unwrap().push(text.to_string());
    }
}

/// An acceptor engine on its own thread; stopped and joined on drop.
struct Acceptor {
    addr: SocketAddr,
    handle: Handle,
    thread: Option<std::thread::JoinHandle<()>>,
    seen: Seen,
}

impl Acceptor {
    fn start() -> Acceptor {
        let text = "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptHost=127.0.0.1\n\
                    SocketAcceptPort=0\nNonStopSession=Y\n\
                    [SESSION]\nBeginString=FIX.4.4\nSenderCompID=ACC\nTargetCompID=ONE\n\
                    [SESSION]\nBeginString=FIX.4.4\nSenderCompID=ACC\nTargetCompID=TWO\n";
        let settings = Settings::parse(text, "test.cfg").unwrap();
        let seen = Seen::default();
        let engine = Engine::from_settings(&settings, seen.clone()).unwrap();
        let addr = engine.listen_addrs()[0];
        let handle = engine.handle();
        let thread = std::thread::spawn(move || {
            let mut engine = engine;
            engine.run().unwrap();
            engine.shutdown(Duration::from_secs(1)).unwrap();
        });
        Acceptor {
            addr,
            handle,
            thread: Some(thread),
            seen,
        }
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.handle.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn encode(msg_type: &str, seq: u64, sender: &str, target: &str, body: &[(u32, &str)]) -> Vec<u8> {
    let mut e = Encoder::new("FIX.4.4");
    e.begin(msg_type.as_bytes());
    e.field_u64(34, seq);
    e.field_str(49, sender);
    e.field_timestamp(52, now_nanos(), TimestampPrecision::Millis);
    e.field_str(56, target);
    for (t, v) in body {
        e.field_str(*t, v);
    }
    e.finish().to_vec()
}

/// A raw FIX client.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
    me: &'static str,
    seq: u64,
}

impl Raw {
    fn connect(addr: SocketAddr, me: &'static str) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        Raw {
            s,
            buf: Vec::new(),
            me,
            seq: 1,
        }
    }

    fn send_raw(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }

    fn send(&mut self, msg_type: &str, body: &[(u32, &str)]) {
        let m = encode(msg_type, self.seq, self.me, "ACC", body);
        self.seq += 1;
        self.send_raw(&m);
    }

    fn logon(addr: SocketAddr, me: &'static str) -> Raw {
        let mut r = Raw::connect(addr, me);
        r.send("A", &[(98, "0"), (108, "30")]);
        let answer = r.next().expect("Logon answer");
        assert!(answer.contains("|35=A|"), "{answer}");
        r
    }

    /// The next message ('|' for SOH), None at EOF; panics after WAIT.
    fn next(&mut self) -> Option<String> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(Some(n)) = codec::frame_len(&self.buf, 1 << 20) {
                let m: Vec<u8> = self.buf.drain(..n).collect();
                let mut f = Fields::new();
                codec::parse(&m, &mut f).expect("the engine sends valid messages");
                return Some(
                    m.iter()
                        .map(|&b| if b == codec::SOH { '|' } else { b as char })
                        .collect(),
                );
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no message within {WAIT:?}");
            self.s.set_read_timeout(Some(left)).unwrap();
            let mut tmp = [0u8; 4096];
            match self.s.read(&mut tmp) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
            }
        }
    }

    /// Reads until EOF, returning what arrived.
    fn until_eof(&mut self) -> Vec<String> {
        let mut got = Vec::new();
        while let Some(m) = self.next() {
            got.push(m);
        }
        got
    }
}

#[test]
fn unknown_session_and_message_before_logon_are_disconnected_without_a_word() {
    let acc = Acceptor::start();
    let mut good = Raw::logon(acc.addr, "ONE");

    let mut stranger = Raw::connect(acc.addr, "NOBODY");
    stranger.send("A", &[(98, "0"), (108, "30")]);
    assert_eq!(stranger.until_eof(), Vec::<String>::new());

    let mut early = Raw::connect(acc.addr, "TWO");
    early.send("0", &[]);
    assert_eq!(early.until_eof(), Vec::<String>::new());

    // A second connection for a session that is logged on is refused too.
    let mut dup = Raw::connect(acc.addr, "ONE");
    dup.send("A", &[(98, "0"), (108, "30")]);
    assert_eq!(dup.until_eof(), Vec::<String>::new());

    // The logged-on session did not notice.
    good.send("D", &[(11, "K1")]);
    let r = good.next().expect("answer");
    assert!(r.contains("|35=8|") && r.contains("|11=K1|"), "{r}");
    // And TWO can still log on properly.
    let _two = Raw::logon(acc.addr, "TWO");
}

#[test]
fn garbage_and_a_huge_body_length_cost_only_their_own_connection() {
    let acc = Acceptor::start();
    let mut one = Raw::logon(acc.addr, "ONE");

    // Garbage before a good message is skipped; the message is processed.
    one.send_raw(b"\x00\x01garbage 8=FI 9=12\x01junk");
    one.send("D", &[(11, "G1")]);
    let r = one.next().expect("answer after garbage");
    assert!(r.contains("|11=G1|"), "{r}");

    // A BodyLength far beyond the limit closes that connection only.
    let mut two = Raw::logon(acc.addr, "TWO");
    two.send_raw(b"8=FIX.4.4\x019=999999999\x0135=D\x01");
    assert_eq!(two.until_eof(), Vec::<String>::new());

    // A bad CheckSum is ignored (garbled), nothing is consumed: the next message with
    // the same number is processed.
    let mut bad = encode("D", one.seq, "ONE", "ACC", &[(11, "BAD")]);
    let n = bad.len();
    bad[n - 2] = if bad[n - 2] == b'0' { b'1' } else { b'0' };
    one.send_raw(&bad);
    one.send("D", &[(11, "G2")]);
    let r = one.next().expect("answer after a bad checksum");
    assert!(r.contains("|11=G2|"), "{r}");

    let events = acc.seen.events.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.contains("exceeds the limit")),
        "{events:?}"
    );
    assert!(!events.iter().any(|e| e == "app BAD"), "{events:?}");
    assert_eq!(
        events.iter().filter(|e| e.starts_with("app G")).count(),
        2,
        "{events:?}"
    );
}

#[test]
fn a_settings_file_with_file_store_and_message_log_continues_the_sequence() {
    let dir = std::env::temp_dir().join(format!("tickwire-fix-engine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!(
        "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptHost=127.0.0.1\nSocketAcceptPort=0\n\
         NonStopSession=Y\nFileStorePath={0}/store\nFileLogPath={0}/log\n\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID=ACC\nTargetCompID=ONE\n",
        dir.display()
    );
    let settings = Settings::parse(&text, "test.cfg").unwrap();
    for round in 0..2u64 {
        let seen = Seen::default();
        let mut engine = Engine::from_settings(&settings, seen.clone()).unwrap();
        let addr = engine.listen_addrs()[0];
        let handle = engine.handle();
        let client = std::thread::spawn(move || {
            let mut c = Raw::connect(addr, "ONE");
            c.seq = 1 + round * 3;
            c.send("A", &[(98, "0"), (108, "30")]);
            let logon = c.next().expect("logon answer");
            c.send("D", &[(11, "S1")]);
            let report = c.next().expect("report");
            c.send("5", &[]);
            let logout = c.next().expect("logout answer");
            handle.stop();
            (logon, report, logout)
        });
        engine.run().unwrap();
        engine.shutdown(Duration::from_secs(1)).unwrap();
        let (logon, report, logout) = client.join().unwrap();
        let seq = |m: &str| {
            m.split('|')
                .find_map(|f| f.strip_prefix("34="))
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        assert_eq!(seq(&logon), 1 + round * 3, "{logon}");
        assert_eq!(seq(&report), 2 + round * 3, "{report}");
        assert_eq!(seq(&logout), 3 + round * 3, "{logout}");
    }
    let log =
        std::fs::read_to_string(dir.join("log/FIX.4.4-ACC-ONE.messages.current.log")).unwrap();
    // Both rounds: 3 messages in, 3 out each.
    assert_eq!(log.lines().count(), 12, "{log}");
    assert!(log.lines().all(|l| l.contains(" : 8=FIX.4.4\x01")), "{log}");
    let events =
        std::fs::read_to_string(dir.join("log/FIX.4.4-ACC-ONE.event.current.log")).unwrap();
    assert!(events.contains("Received logon request"), "{events}");
    let _ = std::fs::remove_dir_all(&dir);
}
