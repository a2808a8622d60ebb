//! `tickwire fix acceptor|initiator`: run the FIX engine from a QuickFIX settings file
//! with a built-in application (`log` or `echo`), printing what happens one line at a
//! time, and sending what is typed on standard input.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use tickwire_fix::codec::{self, data_length_tag, Encoder, Fields, MessageRef, SOH};
use tickwire_fix::order::QuickFixOrder;
use tickwire_fix::session::is_header_tag;
use tickwire_fix::settings::{ConnectionType, SessionId, Settings};
use tickwire_fix::validate::is_admin_msg_type;
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
  TickwireMaxPendingConnections=N    connections waiting for their Logon; a new one
                                     at the limit closes the one that waited
                                     longest (default 64)

A file store whose store.log was deleted, emptied or truncated (store.seqnums records
more) refuses to start; --reset-lost-store starts it over at sequence 1/1.

Output on standard output, one line per item, flushed (the same format as
tools/quickfix/qf_peer), written by a thread of its own: the engine never waits for
it. When 4 MiB of lines wait (standard output not being read), further lines are
dropped, and once output goes on a line says how many:
  DROPPED <n> lines: standard output was not being read
  READY acceptor <addr>... | READY initiator
  IN <session> <message>       message received (after the session checks), '|' for SOH
                               (other control bytes, as a line break, and bytes that
                               are not UTF-8 shown as \\xNN, a backslash as \\\\, C1
                               and bidi controls as \\u{NN})
  OUT <session> <message>      message sent
  EVENT <session> <text>       session events (QuickFIX's wording)
  LOGON <session> / LOGOUT <session>
  SENT <session> <MsgSeqNum>   a message typed on stdin was sent (and stored)
  STORED <session> <MsgSeqNum> <text>
                               typed while the session is not logged on: stored with
                               its number and not sent; as in QuickFIX it reaches the
                               counterparty only in the resend it asks for when a
                               later message shows it the gap (PossDupFlag=Y); a
                               Logout does not (QuickFIX skips the number): do not
                               'quit' right after a STORED line (docs/fix.md)
  WARNING <session> <n> typed message(s) stored and never sent (MsgSeqNum ...)
                               at exit: stored messages the counterparty never asked
                               for (exit status 3)
  ERROR <session> <text>       a line typed on stdin was refused (nothing sent, no
                               sequence number used); the text names the field and
                               why (or the unknown session or command); <session> is
                               the one the line named, else the first

Standard input, one command per line:
  35=D|11=ORD1|21=1|38=100|40=1|54=1|55=IBM|60=20240101-00:00:00
                               send on the first session (MsgType, then the body;
                               header fields you set, such as 97, go first)
  FIX.4.4:TW->QF 35=D|...      send on the named session
  logout [<session>]           log out (all sessions without a name)
  logon [<session>]            enable again after a logout
  quit                         log out and exit
A message is checked before it is sent: it starts with 35=<MsgType> (letters and
digits; not an administrative type 0-5 or A, which the session sends); every field is tag=value with a tag of 1 to 9 digits (no sign, no leading
zero) and a value that is not empty and holds no SOH byte; it leaves out what the
session writes (8, 9, 10, 34, 49, 52, 56; 43 and 122, set on a resend; 50, 57, 142 or
143 when the settings give them); header fields come before the body, once each; a
data field (e.g. 96) matches its length field (95). Otherwise the line is refused.
SIGINT/SIGTERM log every session out (waiting up to 3 s) and exit.
The end of standard input does not stop the engine (an acceptor or initiator runs on,
as a service does, after a script has piped its orders): end a script with `quit`
(`(cat orders.txt; echo quit) | tickwire fix ...`), or send SIGTERM.

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
  # QuickFIX's dictionaries (scripts/fetch-fix-spec.sh fetches them); a comment
  # takes a whole line, as in QuickFIX (after a value it is part of the value):
  # UseDataDictionary=Y
  # DataDictionary=FIX44.xml

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

Exit status: 0 after SIGINT/SIGTERM (every session logged out) or `quit`; 3 the same,
but a message typed on standard input was stored and never sent (a WARNING line names
it: the counterparty never received it); 1 an error
while running or starting (a port in use, a store locked by another engine or lost);
2 a usage or settings error (a bad flag; a settings file that is missing, has a
mistake, or has no session of this side's ConnectionType; a DataDictionary or TLS file
it names that cannot be loaded), before anything starts.

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
    /// Do not print OUT lines (messages sent; IN lines and events are still printed).
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
    let _flush = FlushStdoutOnExit;
    let (role, a) = match args.cmd {
        FixCmd::Acceptor(a) => (ConnectionType::Acceptor, a),
        FixCmd::Initiator(a) => (ConnectionType::Initiator, a),
    };
    // The error names the file (and the line). A settings file that cannot be read or
    // has a mistake is a usage error (exit status 2), found before anything starts.
    let mut settings = Settings::load(&a.config)
        .context("reading FIX settings")
        .map_err(crate::units::UsageError::of)?;
    for w in &settings.warnings {
        eprintln!("warning: {w}");
    }
    let side = match role {
        ConnectionType::Acceptor => "acceptor",
        ConnectionType::Initiator => "initiator",
    };
    let others = settings.sessions.len();
    settings.sessions.retain(|s| s.connection_type == role);
    if settings.sessions.is_empty() {
        // New-user pass: no next step for a file of the other side's sessions.
        let other = match role {
            ConnectionType::Acceptor => "initiator",
            ConnectionType::Initiator => "acceptor",
        };
        let then = match others {
            0 => String::new(),
            n => format!(
                "; its {} ConnectionType={other}: `tickwire fix {other} --config {}`",
                tickwire_rt::text::count(n as u64, "session is", "sessions are"),
                a.config.display()
            ),
        };
        return Err(crate::units::UsageError(format!(
            "{}: no session with ConnectionType={side}{then}",
            a.config.display()
        ))
        .into());
    }
    let unsent = Arc::new(Unsent::default());
    let app = CliApp {
        kind: a.app,
        print_out: !a.no_out,
        unsent: unsent.clone(),
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
    .map_err(|e| {
        // A dictionary or TLS file that cannot be loaded, two sessions sharing a store
        // directory: mistakes in the settings, like a bad line in the file (status 2).
        let config = e.is_config_fault();
        let e = anyhow::Error::new(e).context(format!(
            "starting the FIX {side} from {}",
            a.config.display()
        ));
        if config {
            return crate::units::UsageError::of(e);
        }
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
    let names: Vec<Named> = engine
        .sessions()
        .map(|(key, id)| Named {
            key,
            id: id.clone(),
            name: id.to_string(),
        })
        .collect();
    spawn_stdin(engine.handle(), names.clone(), unsent.clone());
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
    // Typed messages stored and never resent did not reach the counterparty: said, and
    // the exit status says it too (a script piping orders must not see success).
    let mut lost = false;
    for s in &names {
        let seqs = unsent.take(s.key);
        if !seqs.is_empty() {
            lost = true;
            let list: Vec<String> = seqs.iter().map(u64::to_string).collect();
            print_line(
                format!(
                    "WARNING {} {} typed message(s) stored and never sent (MsgSeqNum {}): the \
                     counterparty did not ask for them before the session ended; after a \
                     STORED line, quit only once a later line was SENT (docs/fix.md)",
                    s.name,
                    seqs.len(),
                    list.join(", ")
                )
                .as_bytes(),
            );
        }
    }
    Ok(if lost {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// The messages typed on standard input that were stored and not sent (`STORED`), per
/// session, until a resend sends them: written by the typed commands (which run on the
/// engine thread) and the application, read at exit.
#[derive(Default)]
struct Unsent {
    /// Whether `seqs` holds any (read per outgoing message without the lock).
    any: std::sync::atomic::AtomicBool,
    seqs: Mutex<HashMap<SessionKey, std::collections::BTreeSet<u64>>>,
}

impl Unsent {
    fn lock(&self) -> MutexGuard<'_, HashMap<SessionKey, std::collections::BTreeSet<u64>>> {
        self.seqs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn any(&self) -> bool {
        self.any.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn stored(&self, k: SessionKey, seq: u64) {
        self.lock().entry(k).or_default().insert(seq);
        self.any.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Message `seq` went out on `k` (a resend of a stored one).
    fn sent(&self, k: SessionKey, seq: u64) {
        let mut m = self.lock();
        if let Some(s) = m.get_mut(&k) {
            s.remove(&seq);
        }
        m.retain(|_, s| !s.is_empty());
        self.any
            .store(!m.is_empty(), std::sync::atomic::Ordering::Relaxed);
    }

    fn take(&self, k: SessionKey) -> std::collections::BTreeSet<u64> {
        self.lock().remove(&k).unwrap_or_default()
    }
}

/// Reads commands from standard input on a thread of its own (see `FIX_ABOUT`). Every
/// refused line is answered with an `ERROR <session> <text>` line on standard output,
/// and reading goes on.
fn spawn_stdin(handle: Handle, names: Vec<Named>, unsent: Arc<Unsent>) {
    let _ = std::thread::Builder::new()
        .name("fix-stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match stdin.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                match std::str::from_utf8(&buf) {
                    Ok(line) => command(&handle, &names, &unsent, line.trim()),
                    // A value in another encoding: refused, and the next line is read
                    // (this thread used to end here, ignoring every later command).
                    Err(e) => {
                        if let Some(first) = names.first() {
                            refuse_in_order(
                                &handle,
                                &first.name,
                                format_args!(
                                    "the line is not UTF-8 text (byte {}, 0x{:02X}): nothing \
                                     sent",
                                    e.valid_up_to() + 1,
                                    buf[e.valid_up_to()]
                                ),
                            );
                        }
                    }
                }
            }
        });
}

/// A session as standard input names it.
#[derive(Clone)]
struct Named {
    key: SessionKey,
    id: SessionId,
    /// `id` as printed (`FIX.4.4:CLIENT->VENUE`).
    name: String,
}

/// Prints `ERROR <session> <text>`: a line typed on standard input was refused and
/// nothing was sent. `session` is the one the line addressed (the first session for a
/// line that names none).
fn refuse(session: &str, text: impl std::fmt::Display) {
    print_line(format!("ERROR {session} {text}").as_bytes());
}

/// [`refuse`] from the standard-input thread, in input order: printed by the engine's
/// thread after what it was asked to do for the lines before (new-user pass: a refused
/// later line was printed before the SENT of an earlier one). Printed at once when the
/// engine no longer takes calls.
fn refuse_in_order(handle: &Handle, session: &str, text: impl std::fmt::Display) {
    let text = text.to_string();
    let queued = queue_waiting(|| {
        let (session, text) = (session.to_owned(), text.clone());
        handle.call(move |_| refuse(&session, &text))
    });
    if queued.is_err() {
        refuse(session, text);
    }
}

/// Runs `push` (one command for the engine's thread) until its queue takes it: while
/// the queue is full, standard input waits (a script faster than the engine is slowed
/// down, not answered out of order or refused; review). Fails only when the engine
/// has stopped.
fn queue_waiting(
    mut push: impl FnMut() -> Result<(), tickwire_fix_engine::SendError>,
) -> Result<(), tickwire_fix_engine::SendError> {
    loop {
        match push() {
            Err(tickwire_fix_engine::SendError::QueueFull) => {
                std::thread::sleep(Duration::from_millis(1));
            }
            done => return done,
        }
    }
}

/// `e` and its sources, `: `-separated (a store failure says why).
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Runs one line typed on standard input; what it refuses is answered with [`refuse`].
fn command(handle: &Handle, names: &[Named], unsent: &Arc<Unsent>, line: &str) {
    if line.is_empty() || line.starts_with('#') {
        return;
    }
    // Invariant: `run` refuses settings without a session of its side; nothing to
    // address otherwise.
    let Some(first) = names.first() else { return };
    let sessions = || {
        let all: Vec<&str> = names.iter().map(|s| s.name.as_str()).collect();
        format!("sessions: {}", all.join(", "))
    };
    let find = |name: &str| names.iter().find(|s| s.name == name);
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    let rest = rest.trim();
    match word {
        "quit" => handle.stop(),
        "logout" | "logon" => {
            let targets: Vec<&Named> = if rest.is_empty() {
                names.iter().collect()
            } else if let Some(s) = find(rest) {
                vec![s]
            } else {
                return refuse_in_order(
                    handle,
                    rest,
                    format_args!("no such session ({})", sessions()),
                );
            };
            for s in targets {
                let queued = queue_waiting(|| {
                    if word == "logout" {
                        handle.logout(s.key, None)
                    } else {
                        handle.logon(s.key)
                    }
                });
                if let Err(e) = queued {
                    refuse(&s.name, format_args!("{word} not done: {e}"));
                }
            }
        }
        _ => {
            // A message: `35=...` (or any `tag=value` first word, refused below with
            // the reason) on the first session, or `<session> 35=...`.
            let (session, fields) = if word.contains('=') {
                (first, line)
            } else if let Some(s) = find(word) {
                (s, rest)
            } else if rest.is_empty() {
                return refuse_in_order(
                    handle,
                    &first.name,
                    format_args!(
                        "{word:?} is not a command (logout, logon, quit), a message \
                         (35=<MsgType>|tag=value|...) or a session name ({})",
                        sessions()
                    ),
                );
            } else {
                return refuse_in_order(
                    handle,
                    word,
                    format_args!(
                        "no such session ({}); a message is 35=<MsgType>|... or \
                         <session> 35=<MsgType>|...",
                        sessions()
                    ),
                );
            };
            let key = session.key;
            let name = session.name.clone();
            // Checked here, before anything reaches the session: a refused line uses no
            // sequence number and puts nothing on the wire.
            let Typed { msg_type, body } = match parse_typed(fields, &session.id) {
                Ok(t) => t,
                Err(e) => return refuse_in_order(handle, &name, e),
            };
            // Runs on the engine thread; prints the MsgSeqNum the message got and
            // whether it went out (logged on) or was only stored, or why it was refused.
            let queued = queue_waiting(|| {
                let name = name.clone();
                let unsent = unsent.clone();
                let (msg_type, body) = (msg_type.clone(), body.clone());
                handle.call(move |ctx| {
                    let logged_on = ctx.is_logged_on(key);
                    match ctx.send(key, &msg_type, &body) {
                        Ok(seq) if logged_on => print_line(format!("SENT {name} {seq}").as_bytes()),
                        Ok(seq) => {
                            unsent.stored(key, seq);
                            print_line(
                                format!(
                                    "STORED {name} {seq} not logged on: stored, not sent; it goes \
                                 out in the resend the counterparty asks for after the next \
                                 logon"
                                )
                                .as_bytes(),
                            )
                        }
                        Err(e) => refuse(&name, with_sources(&e)),
                    }
                })
            });
            if let Err(e) = queued {
                refuse(&name, format_args!("not sent: {e}"));
            }
        }
    }
}

/// A message typed on standard input, checked by [`parse_typed`]: the MsgType and
/// the body (`tag=value<SOH>...`) that [`Ctx::send`] takes.
#[derive(Debug, PartialEq, Eq)]
struct Typed {
    msg_type: Vec<u8>,
    body: Vec<u8>,
}

/// Why the session, not a typed line, writes `tag` (None: the line may set it): the
/// encoder writes 8, 9 and 10; the session's header 35 (from the line's first field),
/// 34, 49, 52, 56 and the sub and location IDs its settings give; a resend adds 43
/// and 122 and drops any stored ones. PossResend (97) is the application's: the
/// session never sets it and a resend keeps it.
fn session_sets(tag: u32, id: &SessionId) -> Option<&'static str> {
    let from_settings = |v: &str| !v.is_empty();
    Some(match tag {
        8 => "BeginString (8) is written by the session",
        9 => "BodyLength (9) is computed by the session",
        10 => "CheckSum (10) is computed by the session",
        34 => "MsgSeqNum (34) is assigned by the session",
        49 => "SenderCompID (49) is written by the session",
        52 => "SendingTime (52) is written by the session",
        56 => "TargetCompID (56) is written by the session",
        43 => "PossDupFlag (43) is set by the session when it resends",
        122 => "OrigSendingTime (122) is set by the session when it resends",
        50 if from_settings(&id.sender_sub_id) => {
            "SenderSubID (50) is written by the session (from its settings)"
        }
        57 if from_settings(&id.target_sub_id) => {
            "TargetSubID (57) is written by the session (from its settings)"
        }
        142 if from_settings(&id.sender_location_id) => {
            "SenderLocationID (142) is written by the session (from its settings)"
        }
        143 if from_settings(&id.target_location_id) => {
            "TargetLocationID (143) is written by the session (from its settings)"
        }
        _ => return None,
    })
}

/// A tag as FIX writes it: 1 to 9 digits, the first not 0 (what the codec reads as a
/// tag; anything else a counterparty sees as a malformed or invalid tag).
fn parse_tag(t: &str) -> Option<u32> {
    let ok =
        (1..=9).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_digit()) && !t.starts_with('0');
    if ok {
        t.parse().ok()
    } else {
        None
    }
}

/// Parses and checks the fields of a message typed on standard input for session
/// `id`: `35=<MsgType>|tag=value|...` (`|` for SOH, a trailing `|` allowed), header
/// fields the application sets (such as 97 or 115) before the body. The error says
/// which field is wrong and why; a message it accepts is one the counterparty can
/// parse (checked last with the codec's own parser). Pure: nothing is sent.
fn parse_typed(line: &str, id: &SessionId) -> Result<Typed, String> {
    const SYNTAX: &str = "fields are tag=value separated by '|'";
    let line = line.trim_end_matches('|');
    if line.is_empty() {
        return Err("no message: type 35=<MsgType>|tag=value|...".to_string());
    }
    let mut msg_type: Vec<u8> = Vec::new();
    let mut body = Vec::with_capacity(line.len() + 1);
    // The fields so far (for data fields' lengths), the first body tag, the header
    // tags given.
    let mut seen: Vec<(u32, &str)> = Vec::new();
    let mut first_body_tag: Option<u32> = None;
    let mut header_tags: Vec<u32> = Vec::new();
    for (i, field) in line.split('|').enumerate() {
        let n = i + 1;
        if field.is_empty() {
            return Err(format!("field {n} is empty ('||'): {SYNTAX}"));
        }
        let Some((t, value)) = field.split_once('=') else {
            return Err(format!("field {n} {field:?} has no '=': {SYNTAX}"));
        };
        if t.is_empty() {
            return Err(format!("field {n} {field:?} has no tag before '='"));
        }
        let Some(tag) = parse_tag(t) else {
            return Err(format!(
                "field {n} {field:?}: tag {t:?} is not a positive integer \
                 (1 to 9 digits, no sign, no leading zero)"
            ));
        };
        if n == 1 && tag != 35 {
            return Err(format!(
                "field 1 is {field:?}: a message starts with 35=<MsgType>"
            ));
        }
        if value.is_empty() {
            return Err(if tag == 35 {
                format!("field {n} {field:?}: MsgType (35) is empty")
            } else {
                format!("field {n} {field:?}: tag {tag} has an empty value")
            });
        }
        if value.as_bytes().contains(&SOH) {
            return Err(format!(
                "field {n} {field:?}: the value of tag {tag} contains the SOH byte (0x01), \
                 the FIX field delimiter"
            ));
        }
        if n == 1 {
            if !value.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(format!(
                    "field 1 {field:?}: MsgType (35) {value:?} is not letters and digits"
                ));
            }
            if is_admin_msg_type(value.as_bytes()) {
                return Err(format!(
                    "field 1 {field:?}: MsgType (35) {value:?} is an administrative message, \
                     which the session sends itself (the logout and logon commands ask it to)"
                ));
            }
            msg_type = value.as_bytes().to_vec();
            continue;
        }
        if tag == 35 {
            return Err(format!(
                "field {n} {field:?}: MsgType (35) is given once, as the first field"
            ));
        }
        if let Some(why) = session_sets(tag, id) {
            return Err(format!("field {n} {field:?}: {why}; leave it out"));
        }
        if is_header_tag(tag) {
            if let Some(b) = first_body_tag {
                return Err(format!(
                    "field {n} {field:?}: tag {tag} is a header field and goes before the \
                     body fields (it follows tag {b})"
                ));
            }
            // The hop group (627-630) repeats; any other header field appears once.
            if header_tags.contains(&tag) && !(627..=630).contains(&tag) {
                return Err(format!(
                    "field {n} {field:?}: header field {tag} is given twice"
                ));
            }
            header_tags.push(tag);
        } else if first_body_tag.is_none() {
            first_body_tag = Some(tag);
        }
        if let Some(length_tag) = data_length_tag(tag) {
            if let Some(&(_, len)) = seen.iter().rev().find(|(t, _)| *t == length_tag) {
                match len.parse::<usize>() {
                    Ok(len) if len == value.len() => {}
                    Ok(len) => {
                        return Err(format!(
                            "field {n} {field:?}: data field {tag} has {} bytes but its \
                             length field {length_tag} says {len} (a typed value cannot \
                             contain '|')",
                            value.len()
                        ))
                    }
                    Err(_) => {
                        return Err(format!(
                            "field {n} {field:?}: the length field {length_tag}={len} of \
                             data field {tag} is not a number"
                        ))
                    }
                }
            }
        }
        seen.push((tag, value));
        body.extend_from_slice(field.as_bytes());
        body.push(SOH);
    }
    // The counterparty's view: the codec's parser on the message as the session would
    // frame it (the checks above should leave nothing for it to find).
    let mut enc = Encoder::new(&id.begin_string);
    enc.begin(&msg_type);
    enc.raw_fields(&body);
    let mut fields = Fields::new();
    if let Err(e) = codec::parse(enc.finish(), &mut fields) {
        return Err(format!("the message would not parse: {e}"));
    }
    Ok(Typed { msg_type, body })
}

/// Appends a message as a line shows it: `|` for SOH, any other ASCII control byte (a
/// line break could forge a line of this output, an escape sequence drive the
/// terminal) and every byte that is not UTF-8 as `\xNN`, a backslash as `\\` (so that
/// a peer's literal `\x1b` never reads as an escaped one), C1 controls and the
/// characters that reorder a line (bidi controls, U+2028/9) as `\u{NN}`.
fn push_shown(line: &mut Vec<u8>, raw: &[u8]) {
    use std::io::Write as _;
    for chunk in raw.utf8_chunks() {
        let valid = chunk.valid();
        for (i, c) in valid.char_indices() {
            match c {
                '\x01' => line.push(b'|'),
                // Escaped so that a peer's literal "\x1b" cannot pass for an escape.
                '\\' => line.extend_from_slice(b"\\\\"),
                c if c.is_ascii_control() => {
                    let _ = write!(line, "\\x{:02x}", c as u8);
                }
                c if tickwire_rt::text::unsafe_for_terminal(c) => {
                    let _ = write!(line, "{}", c.escape_unicode());
                }
                c => line.extend_from_slice(&valid.as_bytes()[i..i + c.len_utf8()]),
            }
        }
        for &b in chunk.invalid() {
            let _ = write!(line, "\\x{b:02x}");
        }
    }
}

/// Prints one line: queues it for the stdout writer thread, which writes and flushes
/// what is queued as soon as it can (tests and people read these as they come). Never
/// waits for standard output: see [`StdoutLines`].
fn print_line(line: &[u8]) {
    stdout_lines().push(line);
}

/// Bytes of lines queued for standard output at most; a line that does not fit is
/// dropped and counted.
const STDOUT_QUEUE_BYTES: usize = 4 << 20;

/// The lines printed by the engine thread (IN, OUT, EVENT, LOGON...) and the stdin
/// thread (SENT, ERROR...), written to standard output by a thread of its own. Before,
/// the engine thread wrote them itself: with standard output a pipe nobody read (`|
/// less` left on a page, a stuck log shipper), a peer sending 4,000 orders filled the
/// pipe and froze the whole engine, every session with it (`--no-out` too: it still
/// prints every IN line and event). Now a line that finds [`STDOUT_QUEUE_BYTES`]
/// already queued is dropped and counted, and once the writer gets through, it says so
/// on standard output: `DROPPED <n> lines: standard output was not being read`.
/// A lock held for a `memcpy` is all the engine thread shares with the writer; the
/// writer swaps the buffer out and writes without it.
struct StdoutLines {
    queue: Mutex<Queued>,
    /// Lines were queued, or closing was asked (the writer waits on it), or the writer
    /// finished (`close` waits on it).
    changed: Condvar,
}

#[derive(Default)]
struct Queued {
    buf: Vec<u8>,
    /// Lines dropped since the writer last reported.
    dropped: u64,
    /// Write what is queued, then stop.
    closing: bool,
    /// The writer has stopped.
    done: bool,
}

/// The process's one [`StdoutLines`], its writer thread started on first use.
fn stdout_lines() -> &'static StdoutLines {
    static LINES: OnceLock<Arc<StdoutLines>> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines = Arc::new(StdoutLines {
            queue: Mutex::new(Queued::default()),
            changed: Condvar::new(),
        });
        let writer = lines.clone();
        let spawned = std::thread::Builder::new()
            .name("fix-stdout".into())
            .spawn(move || writer.write_all());
        if let Err(e) = spawned {
            // Nothing will be printed; the engine still runs.
            eprintln!("error: starting the standard output writer: {e}");
        }
        lines
    })
}

impl StdoutLines {
    fn lock(&self) -> MutexGuard<'_, Queued> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, line: &[u8]) {
        let mut q = self.lock();
        if q.closing || q.buf.len() + line.len() + 1 > STDOUT_QUEUE_BYTES {
            q.dropped += 1;
            return;
        }
        let was_empty = q.buf.is_empty();
        q.buf.extend_from_slice(line);
        q.buf.push(b'\n');
        drop(q);
        // The writer waits only on an empty queue.
        if was_empty {
            self.changed.notify_all();
        }
    }

    /// The writer thread: writes what is queued, one `write` and flush per batch.
    fn write_all(&self) {
        let mut batch = Vec::new();
        loop {
            let (dropped, closing) = {
                let mut q = self.lock();
                while q.buf.is_empty() && q.dropped == 0 && !q.closing {
                    q = self.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
                std::mem::swap(&mut q.buf, &mut batch);
                (std::mem::take(&mut q.dropped), q.closing)
            };
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&batch);
            if dropped > 0 {
                let _ = writeln!(
                    out,
                    "DROPPED {dropped} lines: standard output was not being read"
                );
            }
            let _ = out.flush();
            drop(out);
            if dropped > 0 {
                tracing::warn!("{dropped} lines dropped: standard output was not being read");
            }
            batch.clear();
            if closing && self.lock().buf.is_empty() {
                break;
            }
        }
        self.lock().done = true;
        self.changed.notify_all();
    }

    /// Asks the writer to write what is queued and stop, waiting for it at most
    /// `limit` (a standard output nobody reads must not keep the process from exiting).
    fn close(&self, limit: Duration) {
        let mut q = self.lock();
        q.closing = true;
        self.changed.notify_all();
        let deadline = std::time::Instant::now() + limit;
        while !q.done {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            q = self
                .changed
                .wait_timeout(q, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// Writes out the queued lines when `run` returns, whichever way.
struct FlushStdoutOnExit;

impl Drop for FlushStdoutOnExit {
    fn drop(&mut self) {
        stdout_lines().close(Duration::from_secs(2));
    }
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
    /// Typed messages stored and not yet resent (an outgoing message with the number
    /// of one takes it out).
    unsent: Arc<Unsent>,
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
        push_shown(&mut self.line, raw);
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
        if self.print_out {
            self.print_msg("OUT", session, msg.raw());
        }
    }

    fn to_app(&mut self, session: SessionKey, msg: &MessageRef<'_>) {
        if self.print_out {
            self.print_msg("OUT", session, msg.raw());
        }
        if self.unsent.any() {
            if let Some(seq) = msg.seq_num() {
                self.unsent.sent(session, seq);
            }
        }
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
        self.print_out || self.unsent.any()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile-input pass: a FIX value can hold any byte; what the IN line shows must be
    /// unambiguous and must not drive the terminal.
    #[test]
    fn shown_lines_escape_what_a_peer_could_forge_with() {
        let mut line = Vec::new();
        push_shown(
            &mut line,
            b"35=D\x0158=a\\x1b b\x1b[2J \xc2\x9b2J \xe2\x80\xae rtl \xff\xfe Z\xc3\xbcrich\n\x01",
        );
        assert_eq!(
            String::from_utf8(line).unwrap(),
            r"35=D|58=a\\x1b b\x1b[2J \u{9b}2J \u{202e} rtl \xff\xfe Zürich\x0a|"
        );
    }

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

    fn id() -> SessionId {
        SessionId {
            begin_string: "FIX.4.4".into(),
            sender_comp_id: "CLIENT".into(),
            target_comp_id: "VENUE".into(),
            ..SessionId::default()
        }
    }

    /// Good lines: the MsgType and the body `Ctx::send` gets (`|` for SOH here).
    #[test]
    fn typed_messages_become_msg_type_and_body() {
        let cases: &[(&str, &str, &str)] = &[
            ("35=D|11=ORD1|55=IBM", "D", "11=ORD1|55=IBM|"),
            ("35=D|11=ORD1|55=IBM|", "D", "11=ORD1|55=IBM|"),
            ("35=D", "D", ""),
            ("35=U1|5001=x y", "U1", "5001=x y|"),
            // Header fields the application sets, before the body.
            ("35=D|97=Y|115=ON|11=A", "D", "97=Y|115=ON|11=A|"),
            // Sub IDs the settings do not give are the application's.
            ("35=D|50=DESK|57=ALGO|11=A", "D", "50=DESK|57=ALGO|11=A|"),
            // The hop group repeats in the header.
            (
                "35=D|627=2|628=A|628=B|11=A",
                "D",
                "627=2|628=A|628=B|11=A|",
            ),
            // A data field with its length.
            ("35=D|95=2|96=ab|11=A", "D", "95=2|96=ab|11=A|"),
            // Repeated body tags (groups) are the application's business.
            ("35=D|11=A|78=2|79=X|79=Y", "D", "11=A|78=2|79=X|79=Y|"),
            ("35=D|999999999=A", "D", "999999999=A|"),
        ];
        for &(line, msg_type, body) in cases {
            let t = parse_typed(line, &id()).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(t.msg_type, msg_type.as_bytes(), "{line}");
            let shown: String = t
                .body
                .iter()
                .map(|&b| if b == SOH { '|' } else { char::from(b) })
                .collect();
            assert_eq!(shown, body, "{line}");
        }
    }

    /// Bad lines: refused with the field and the reason (the text of the ERROR line).
    #[test]
    fn malformed_typed_messages_are_refused_saying_which_field_and_why() {
        let syntax = "fields are tag=value separated by '|'";
        let not_int = "is not a positive integer (1 to 9 digits, no sign, no leading zero)";
        let cases: Vec<(&str, String)> =
            vec![
            // The new-user review's four lines.
            (
                "35=D|bogus",
                format!("field 2 \"bogus\" has no '=': {syntax}"),
            ),
            (
                "35=D|11=B|10=000",
                "field 3 \"10=000\": CheckSum (10) is computed by the session; leave it out"
                    .into(),
            ),
            ("35=|11=X", "field 1 \"35=\": MsgType (35) is empty".into()),
            (
                "35=D|11=D|34=999",
                "field 3 \"34=999\": MsgSeqNum (34) is assigned by the session; leave it out"
                    .into(),
            ),
            // Syntax.
            ("", "no message: type 35=<MsgType>|tag=value|...".into()),
            ("|", "no message: type 35=<MsgType>|tag=value|...".into()),
            (
                "35=D||11=X",
                format!("field 2 is empty ('||'): {syntax}"),
            ),
            ("35=D|=X", "field 2 \"=X\" has no tag before '='".into()),
            ("35=D|011=X", format!("field 2 \"011=X\": tag \"011\" {not_int}")),
            ("35=D|0=X", format!("field 2 \"0=X\": tag \"0\" {not_int}")),
            ("35=D|-1=X", format!("field 2 \"-1=X\": tag \"-1\" {not_int}")),
            ("35=D|+1=X", format!("field 2 \"+1=X\": tag \"+1\" {not_int}")),
            ("35=D| 11=X", format!("field 2 \" 11=X\": tag \" 11\" {not_int}")),
            ("35=D|1a=X", format!("field 2 \"1a=X\": tag \"1a\" {not_int}")),
            (
                "35=D|1234567890=X",
                format!("field 2 \"1234567890=X\": tag \"1234567890\" {not_int}"),
            ),
            (
                "35=D|11=",
                "field 2 \"11=\": tag 11 has an empty value".into(),
            ),
            (
                "35=D|11=A|58=|55=IBM",
                "field 3 \"58=\": tag 58 has an empty value".into(),
            ),
            (
                "35=D|58=a\u{1}b",
                "field 2 \"58=a\\u{1}b\": the value of tag 58 contains the SOH byte (0x01), \
                 the FIX field delimiter"
                    .into(),
            ),
            // MsgType.
            (
                "11=X|35=D",
                "field 1 is \"11=X\": a message starts with 35=<MsgType>".into(),
            ),
            (
                "8=FIX.4.4|9=5|35=D",
                "field 1 is \"8=FIX.4.4\": a message starts with 35=<MsgType>".into(),
            ),
            (
                "bogus",
                format!("field 1 \"bogus\" has no '=': {syntax}"),
            ),
            (
                "35=D E|11=X",
                "field 1 \"35=D E\": MsgType (35) \"D E\" is not letters and digits".into(),
            ),
            (
                "35=A|98=0|108=30",
                "field 1 \"35=A\": MsgType (35) \"A\" is an administrative message, which the \
                 session sends itself (the logout and logon commands ask it to)"
                    .into(),
            ),
            (
                "35=0",
                "field 1 \"35=0\": MsgType (35) \"0\" is an administrative message, which the \
                 session sends itself (the logout and logon commands ask it to)"
                    .into(),
            ),
            (
                "35=D|11=X|35=8",
                "field 3 \"35=8\": MsgType (35) is given once, as the first field".into(),
            ),
            // Fields the session writes.
            (
                "35=D|8=FIX.4.2",
                "field 2 \"8=FIX.4.2\": BeginString (8) is written by the session; leave it out"
                    .into(),
            ),
            (
                "35=D|9=66",
                "field 2 \"9=66\": BodyLength (9) is computed by the session; leave it out".into(),
            ),
            (
                "35=D|49=ME",
                "field 2 \"49=ME\": SenderCompID (49) is written by the session; leave it out"
                    .into(),
            ),
            (
                "35=D|56=YOU",
                "field 2 \"56=YOU\": TargetCompID (56) is written by the session; leave it out"
                    .into(),
            ),
            (
                "35=D|52=20240101-00:00:00",
                "field 2 \"52=20240101-00:00:00\": SendingTime (52) is written by the session; \
                 leave it out"
                    .into(),
            ),
            (
                "35=D|43=Y",
                "field 2 \"43=Y\": PossDupFlag (43) is set by the session when it resends; \
                 leave it out"
                    .into(),
            ),
            (
                "35=D|122=20240101-00:00:00",
                "field 2 \"122=20240101-00:00:00\": OrigSendingTime (122) is set by the session \
                 when it resends; leave it out"
                    .into(),
            ),
            // Header order and repetition.
            (
                "35=D|11=X|97=Y",
                "field 3 \"97=Y\": tag 97 is a header field and goes before the body fields \
                 (it follows tag 11)"
                    .into(),
            ),
            (
                "35=D|115=A|115=B",
                "field 3 \"115=B\": header field 115 is given twice".into(),
            ),
            // Data fields.
            (
                "35=D|95=5|96=ab",
                "field 3 \"96=ab\": data field 96 has 2 bytes but its length field 95 says 5 \
                 (a typed value cannot contain '|')"
                    .into(),
            ),
            (
                "35=D|95=x|96=ab",
                "field 3 \"96=ab\": the length field 95=x of data field 96 is not a number"
                    .into(),
            ),
        ];
        for (line, want) in &cases {
            assert_eq!(parse_typed(line, &id()), Err(want.clone()), "{line:?}");
        }
        // Sub and location IDs the settings give are the session's.
        let with_sub = SessionId {
            sender_sub_id: "DESK".into(),
            target_location_id: "LDN".into(),
            ..id()
        };
        assert_eq!(
            parse_typed("35=D|50=X", &with_sub),
            Err(
                "field 2 \"50=X\": SenderSubID (50) is written by the session (from its \
                 settings); leave it out"
                    .into()
            )
        );
        assert_eq!(
            parse_typed("35=D|143=X", &with_sub),
            Err(
                "field 2 \"143=X\": TargetLocationID (143) is written by the session (from \
                 its settings); leave it out"
                    .into()
            )
        );
        assert!(parse_typed("35=D|57=X", &with_sub).is_ok());
    }
}
