//! `tickwire fix acceptor|initiator`: run the FIX engine from a QuickFIX settings file
//! with a built-in application (`log` or `echo`), printing what happens one line at a
//! time, and sending what is typed on standard input.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use tickwire_fix::codec::{MessageRef, SOH};
use tickwire_fix::order::QuickFixOrder;
use tickwire_fix::settings::{ConnectionType, Settings};
use tickwire_fix_engine::{Application, Ctx, Engine, EngineOptions, Handle, SessionKey};

const FIX_ABOUT: &str = "\
Run a FIX acceptor or initiator from a QuickFIX settings file.

tickwire's FIX engine reads QuickFIX's session settings format as is ([DEFAULT] and
[SESSION] sections, the same keys), so a QuickFIX configuration can be reused. Keys
QuickFIX knows but tickwire does not implement are reported and ignored. Unknown keys
and malformed lines (neither Key=Value, a [SECTION] header nor a # comment) are an
error naming the file and line. AllowedRemoteAddresses is enforced (a peer at another
address is closed without a reply).

TLS: SocketUseSSL=Y in [DEFAULT] runs every session over TLS with QuickFIX's SSL
settings, read from [DEFAULT] as QuickFIX does: ServerCertificateFile (+KeyFile) for
an acceptor; CertificationAuthoritiesFile (or ...Directory) to verify the peer (an
initiator must have one); ClientCertificateFile (+KeyFile) for an initiator;
CertificateVerifyLevel=1 (client certificate required) or 2 (optional);
CertificateRevocationListFile/Directory; SSLProtocol (TLS 1.2 and 1.3 only).
SSLCipherSuite (an OpenSSL cipher list) refuses to start, as does any SSL setting
without SocketUseSSL=Y: a session configured for TLS never runs in clear text.
An acceptor without SocketAcceptHost listens on ALL interfaces (QuickFIX's default;
a warning says so): set SocketAcceptHost=127.0.0.1 to keep it local. See docs/fix.md
\"TLS and network access\". tickwire's own keys start with 'Tickwire':
  TickwireIdleStrategy=block|spin    wait in epoll (default) or busy-poll
  TickwireStoreSync=every|batched|os file store fdatasync policy (default os)
  TickwireStoreSyncBatch=N           messages per fdatasync with 'batched'
  TickwireMaxLogonLength=BYTES       longest first message (Logon) buffered before
                                     Logon (default 8192)
  TickwireMaxPendingConnections=N    connections waiting for their Logon; more are
                                     closed at accept (default 64)

A file store whose store.log was deleted, emptied or truncated (store.seqnums records
more) refuses to start; --reset-lost-store starts it over at sequence 1/1.

Output, one line per item, flushed (the same format as tools/quickfix/qf_peer):
  READY acceptor <addr>... | READY initiator
  IN <session> <message>       message received (after the session checks), '|' for SOH
  OUT <session> <message>      message sent
  EVENT <session> <text>       session events (QuickFIX's wording)
  LOGON <session> / LOGOUT <session>
  SENT <session> <MsgSeqNum>   a message typed on stdin was sent (and stored)
  STORED <session> <MsgSeqNum> <text>
                               typed while the session is not logged on: stored with
                               its number and not sent; as in QuickFIX it reaches the
                               counterparty only in the resend it asks for after the
                               next logon (PossDupFlag=Y)
  ERROR <session> <text>       a message typed on stdin was refused

Standard input, one command per line:
  35=D|11=ORD1|21=1|38=100|40=1|54=1|55=IBM|60=20240101-00:00:00
                               send on the first session (MsgType, then the body;
                               header fields you set, such as 97, go first)
  FIX.4.4:TW->QF 35=D|...      send on the named session
  logout [<session>]           log out (all sessions without a name)
  logon [<session>]            enable again after a logout
  quit                         log out and exit
SIGINT/SIGTERM log every session out (waiting up to 3 s) and exit.

Monitoring: --http serves /healthz, /varz, /sessionz (state, next sender and target
sequence numbers, message counts, resend requests), /metrics (Prometheus) and a live
dashboard, on 127.0.0.1:7482 unless ADDR says otherwise; the line
'tickwire monitor listening on http://ADDR/' comes before READY (docs/monitoring.md).";

const FIX_EXAMPLES: &str = "\
Applications (--app):
  log    print what arrives
  echo   send NewOrderSingle (D), SecurityDefinition (d) and Email (C) messages back
         to their sender (same MsgType, the whole message: body and header fields
         such as 97 or 115, written in QuickFIX's field order); ignore a
         PossResend=Y NewOrderSingle whose ClOrdID was already seen on that session
         since the last logout (the last 16 MiB of ClOrdIDs);
         answer any other application message as unsupported (BusinessMessageReject
         380=3, a Reject before FIX.4.2); answer a FIXT Logon with the counterparty's
         DefaultApplVerID: all as QuickFIX's acceptance-test application does

A settings file for both sides (save as fix.cfg; run 'tickwire fix acceptor --config
fix.cfg --app echo' in one terminal and 'tickwire fix initiator --config fix.cfg' in
another: each command uses the sessions of its ConnectionType):

  [DEFAULT]
  StartTime=00:00:00
  EndTime=00:00:00
  HeartBtInt=30
  ReconnectInterval=1
  FileStorePath=/tmp/tickwire-fix/store
  # FileLogPath=/tmp/tickwire-fix/log
  # UseDataDictionary=Y
  # DataDictionary=/path/to/FIX44.xml

  [SESSION]
  ConnectionType=acceptor
  BeginString=FIX.4.4
  SenderCompID=VENUE
  TargetCompID=CLIENT
  SocketAcceptHost=127.0.0.1
  SocketAcceptPort=9878

  [SESSION]
  ConnectionType=initiator
  BeginString=FIX.4.4
  SenderCompID=CLIENT
  TargetCompID=VENUE
  SocketConnectHost=127.0.0.1
  SocketConnectPort=9878

Examples:
  tickwire fix acceptor --config fix.cfg --app echo      # the venue side, echoing
  tickwire fix initiator --config fix.cfg                # the client side; type
                                                         # '35=D|11=ORD1|...' to send
  tickwire fix acceptor --config fix.cfg --no-out        # print only what arrives

More: docs/fix.md (\"Engine and CLI\").";

/// `tickwire fix ...`
#[derive(Args)]
#[command(about = "Run a FIX acceptor or initiator from a QuickFIX settings file", long_about = FIX_ABOUT, after_help = FIX_EXAMPLES)]
pub struct FixArgs {
    #[command(subcommand)]
    cmd: FixCmd,
}

#[derive(Subcommand)]
enum FixCmd {
    /// Accept connections for the settings' acceptor sessions.
    #[command(long_about = FIX_ABOUT, after_help = FIX_EXAMPLES)]
    Acceptor(RunArgs),
    /// Connect the settings' initiator sessions.
    #[command(long_about = FIX_ABOUT, after_help = FIX_EXAMPLES)]
    Initiator(RunArgs),
}

#[derive(Args)]
struct RunArgs {
    /// QuickFIX settings file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Built-in application.
    #[arg(long, value_enum, default_value_t = AppKind::Log)]
    app: AppKind,
    /// Do not print OUT lines (messages sent).
    #[arg(long)]
    no_out: bool,
    /// Start a session whose file store log was lost, emptied or truncated over at
    /// sequence 1/1 (without it, such a store refuses to start: the counterparty would
    /// see sequence numbers reused).
    #[arg(long)]
    reset_lost_store: bool,
    #[command(flatten)]
    http: crate::monitor::HttpArgs,
}

/// `--http` without an address: 127.0.0.1 on this port.
const FIX_HTTP_PORT: u16 = 7482;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum AppKind {
    /// Print what arrives.
    Log,
    /// Echo D, d and C back; reject other application messages as unsupported.
    Echo,
}

/// Entry point.
pub fn run(args: FixArgs) -> anyhow::Result<ExitCode> {
    let (role, a) = match args.cmd {
        FixCmd::Acceptor(a) => (ConnectionType::Acceptor, a),
        FixCmd::Initiator(a) => (ConnectionType::Initiator, a),
    };
    // The error names the file (and the line).
    let mut settings = Settings::load(&a.config).context("reading FIX settings")?;
    for w in &settings.warnings {
        eprintln!("warning: {w}");
    }
    let side = match role {
        ConnectionType::Acceptor => "acceptor",
        ConnectionType::Initiator => "initiator",
    };
    settings.sessions.retain(|s| s.connection_type == role);
    if settings.sessions.is_empty() {
        bail!(
            "{}: no session with ConnectionType={side}",
            a.config.display()
        );
    }
    let app = CliApp {
        kind: a.app,
        print_out: !a.no_out,
        names: Vec::new(),
        seen: HashMap::new(),
        body: Vec::new(),
        line: Vec::new(),
        order: QuickFixOrder::new(),
    };
    let opts = EngineOptions {
        reset_lost_stores: a.reset_lost_store,
        ..EngineOptions::from_settings(&settings)
    };
    // The echo is QuickFIX's acceptance-test application, which answers a FIXT Logon
    // with the counterparty's DefaultApplVerID (its fromAdmin sets the session's).
    let echo = a.app == AppKind::Echo;
    let mut engine = Engine::from_settings_adjusted(&settings, app, opts, |spec| {
        spec.config.adopt_counterparty_default_appl_ver_id = echo;
    })
    .with_context(|| format!("starting the FIX {side} from {}", a.config.display()))
    .map_err(|e| {
        // Only an acceptor listens (SocketAcceptPort); an initiator's connect
        // failures are not binds.
        let hint = format!(
            "is another FIX acceptor running? pick another SocketAcceptPort in {}",
            a.config.display()
        );
        crate::listen::hint_in_use(e, &hint)
    })?;
    let _server = match a.http.addr(FIX_HTTP_PORT)? {
        Some(addr) => {
            let component =
                std::sync::Arc::new(crate::monitor::fix::FixMonitor::new(engine.monitor(), side));
            let access = a.http.access(addr, None)?;
            Some(crate::monitor::serve(
                addr,
                component,
                a.http.metrics_max_series,
                access,
            )?)
        }
        None => None,
    };
    let stop = engine.stop_flag();
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    crate::logging::reopen_on_sighup()?;
    let names: Vec<(SessionKey, String)> = engine
        .sessions()
        .map(|(k, id)| (k, id.to_string()))
        .collect();
    spawn_stdin(engine.handle(), names);
    let ready = match role {
        ConnectionType::Acceptor => {
            let addrs: Vec<String> = engine
                .listen_addrs()
                .iter()
                .map(|a| a.to_string())
                .collect();
            format!("READY acceptor {}", addrs.join(" "))
        }
        ConnectionType::Initiator => "READY initiator".to_string(),
    };
    print_line(ready.as_bytes());
    engine.run().context("running the FIX engine")?;
    engine
        .shutdown(Duration::from_secs(3))
        .context("stopping the FIX engine")?;
    Ok(ExitCode::SUCCESS)
}

/// Reads commands from standard input on a thread of its own (see `FIX_ABOUT`).
fn spawn_stdin(handle: Handle, names: Vec<(SessionKey, String)>) {
    let _ = std::thread::Builder::new()
        .name("fix-stdin".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                let Ok(line) = line else { return };
                if let Err(e) = command(&handle, &names, line.trim()) {
                    eprintln!("error: {e:#}");
                }
            }
        });
}

fn command(handle: &Handle, names: &[(SessionKey, String)], line: &str) -> anyhow::Result<()> {
    if line.is_empty() || line.starts_with('#') {
        return Ok(());
    }
    let find = |name: &str| -> anyhow::Result<SessionKey> {
        names
            .iter()
            .find(|(_, n)| n == name)
            .map(|(k, _)| *k)
            .with_context(|| {
                let all: Vec<&str> = names.iter().map(|(_, n)| n.as_str()).collect();
                format!("no session {name} (sessions: {})", all.join(", "))
            })
    };
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    let rest = rest.trim();
    let targets = |rest: &str| -> anyhow::Result<Vec<SessionKey>> {
        if rest.is_empty() {
            Ok(names.iter().map(|(k, _)| *k).collect())
        } else {
            Ok(vec![find(rest)?])
        }
    };
    match word {
        "quit" => {
            handle.stop();
            Ok(())
        }
        "logout" => {
            for k in targets(rest)? {
                handle.logout(k, None)?;
            }
            Ok(())
        }
        "logon" => {
            for k in targets(rest)? {
                handle.logon(k)?;
            }
            Ok(())
        }
        _ => {
            let (key, fields) = if word.starts_with("35=") {
                let Some((k, _)) = names.first() else {
                    bail!("no session")
                };
                (*k, line)
            } else {
                (find(word)?, rest)
            };
            let fields = fields.trim_end_matches('|');
            let Some(after) = fields.strip_prefix("35=") else {
                bail!("a message starts with 35=<MsgType>: {line}");
            };
            let (msg_type, body) = after.split_once('|').unwrap_or((after, ""));
            let mut bytes: Vec<u8> = body
                .bytes()
                .map(|b| if b == b'|' { SOH } else { b })
                .collect();
            if !bytes.is_empty() {
                bytes.push(SOH);
            }
            let msg_type = msg_type.as_bytes().to_vec();
            let name = names
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, n)| n.clone())
                .unwrap_or_default();
            // Runs on the engine thread; prints the MsgSeqNum the message got and
            // whether it went out (logged on) or was only stored, or why it was refused.
            handle.call(move |ctx| {
                let logged_on = ctx.is_logged_on(key);
                match ctx.send(key, &msg_type, &bytes) {
                    Ok(seq) if logged_on => print_line(format!("SENT {name} {seq}").as_bytes()),
                    Ok(seq) => print_line(
                        format!(
                            "STORED {name} {seq} not logged on: stored, not sent; it goes out \
                             in the resend the counterparty asks for after the next logon"
                        )
                        .as_bytes(),
                    ),
                    Err(e) => print_line(format!("ERROR {name} {e}").as_bytes()),
                }
            })?;
            Ok(())
        }
    }
}

/// Prints one line and flushes it (tests and people read these as they come).
fn print_line(line: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Bytes of ClOrdIDs the echo application remembers per session; past this it starts
/// over (a peer sending new ClOrdIDs for ever must not grow the process for ever).
const SEEN_IDS_MAX_BYTES: usize = 16 << 20;

/// The ClOrdIDs one session's echo has seen, bounded by [`SEEN_IDS_MAX_BYTES`].
#[derive(Default)]
struct SeenIds {
    ids: HashSet<Vec<u8>>,
    bytes: usize,
}

impl SeenIds {
    fn insert(&mut self, id: &[u8]) {
        // Each entry costs its bytes plus the set's and the Vec's own words.
        let cost = id.len() + 48;
        if self.bytes + cost > SEEN_IDS_MAX_BYTES {
            self.ids.clear();
            self.bytes = 0;
        }
        if self.ids.insert(id.to_vec()) {
            self.bytes += cost;
        }
    }
}

/// The `log` and `echo` applications.
struct CliApp {
    kind: AppKind,
    print_out: bool,
    names: Vec<String>,
    /// echo: ClOrdIDs seen per session since the last logout (QuickFIX's
    /// acceptance-test application forgets them all when any session logs out).
    seen: HashMap<SessionKey, SeenIds>,
    body: Vec<u8>,
    line: Vec<u8>,
    order: QuickFixOrder,
}

impl CliApp {
    fn name(&self, k: SessionKey) -> &str {
        self.names.get(k.0).map_or("?", String::as_str)
    }

    fn print_msg(&mut self, what: &str, k: SessionKey, raw: &[u8]) {
        self.line.clear();
        self.line.extend_from_slice(what.as_bytes());
        self.line.push(b' ');
        let name = self.names.get(k.0).map_or("?", String::as_str);
        self.line.extend_from_slice(name.as_bytes());
        self.line.push(b' ');
        self.line
            .extend(raw.iter().map(|&b| if b == SOH { b'|' } else { b }));
        print_line(&self.line);
    }

    fn echo(&mut self, ctx: &mut Ctx<'_>, k: SessionKey, msg: &MessageRef<'_>) {
        let msg_type = msg.msg_type();
        if msg_type == b"j" {
            // Rejecting a reject would start an endless exchange with a peer that
            // does the same (QuickFIX's echo does).
            return;
        }
        if !matches!(msg_type, b"D" | b"d" | b"C") {
            if let Some(seq) = msg.seq_num() {
                if let Err(e) = ctx.reject_unsupported(k, seq, msg_type) {
                    eprintln!("error: rejecting on {}: {e}", self.name(k));
                }
            }
            return;
        }
        if msg_type == b"D" {
            let cl_ord_id = msg.get(11).unwrap_or_default();
            let poss_resend = msg.get_bool(97) == Some(true);
            let seen = self.seen.entry(k).or_default();
            if poss_resend && seen.ids.contains(cl_ord_id) {
                let text = format!(
                    "EVENT {} Ignoring PossResend NewOrderSingle {}",
                    self.name(k),
                    String::from_utf8_lossy(cl_ord_id)
                );
                print_line(text.as_bytes());
                return;
            }
            seen.insert(cl_ord_id);
        }
        // As QuickFIX's acceptance-test application: the whole parsed message goes
        // back (header fields such as 97 or 115 included, not reversed), written in
        // QuickFIX's field order (body ascending, groups in dictionary order).
        self.body.clear();
        self.order
            .write_body(msg, ctx.dictionary_for(k, msg), &mut self.body);
        if let Err(e) = ctx.send(k, msg_type, &self.body) {
            eprintln!("error: echoing on {}: {e}", self.name(k));
        }
    }
}

impl Application for CliApp {
    fn on_create(&mut self, session: SessionKey, id: &tickwire_fix::settings::SessionId) {
        if self.names.len() <= session.0 {
            self.names.resize(session.0 + 1, String::new());
        }
        self.names[session.0] = id.to_string();
    }

    fn on_logon(&mut self, _ctx: &mut Ctx<'_>, session: SessionKey) {
        print_line(format!("LOGON {}", self.name(session)).as_bytes());
    }

    fn on_logout(&mut self, _ctx: &mut Ctx<'_>, session: SessionKey) {
        print_line(format!("LOGOUT {}", self.name(session)).as_bytes());
        // As QuickFIX's acceptance-test application (`onLogout` resets its cracker's
        // ClOrdID set): a PossResend order after a new logon is echoed
        // (fix4x/19b_PossResendMessageThatHasNotBeenSent).
        self.seen.clear();
    }

    fn to_admin(&mut self, session: SessionKey, msg: &MessageRef<'_>) {
        self.print_msg("OUT", session, msg.raw());
    }

    fn to_app(&mut self, session: SessionKey, msg: &MessageRef<'_>) {
        self.print_msg("OUT", session, msg.raw());
    }

    fn from_admin(&mut self, _ctx: &mut Ctx<'_>, session: SessionKey, msg: &MessageRef<'_>) {
        self.print_msg("IN", session, msg.raw());
    }

    fn from_app(&mut self, ctx: &mut Ctx<'_>, session: SessionKey, msg: &MessageRef<'_>) {
        self.print_msg("IN", session, msg.raw());
        if self.kind == AppKind::Echo {
            self.echo(ctx, session, msg);
        }
    }

    fn on_event(&mut self, session: SessionKey, text: &str) {
        print_line(format!("EVENT {} {text}", self.name(session)).as_bytes());
    }

    fn observe_outgoing(&self) -> bool {
        self.print_out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_ids_remember_and_start_over_at_their_byte_bound() {
        let mut seen = SeenIds::default();
        seen.insert(b"ORD1");
        seen.insert(b"ORD1");
        assert!(seen.ids.contains(b"ORD1".as_slice()));
        assert_eq!(seen.ids.len(), 1);
        assert_eq!(seen.bytes, 4 + 48, "a repeated id costs nothing more");
        // Ids of 1 KiB: the set never holds more than the bound's worth.
        let id = |i: usize| format!("{i:01024}").into_bytes();
        let per = 1024 + 48;
        let fit = SEEN_IDS_MAX_BYTES / per;
        for i in 0..fit + 10 {
            seen.insert(&id(i));
            assert!(seen.bytes <= SEEN_IDS_MAX_BYTES);
        }
        // It started over once the next id did not fit: the oldest are forgotten,
        // the newest remembered.
        assert!(!seen.ids.contains(&id(0)));
        assert!(seen.ids.contains(&id(fit + 9)));
        assert!(seen.ids.len() < fit);
    }
}
