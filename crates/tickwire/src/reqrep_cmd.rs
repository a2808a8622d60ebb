//! `tickwire request` and `tickwire reply`.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use tickwire_client::{
    Client, ClientOptions, Error, ErrorCode, LinkEvent, ReconnectingClient, ReplyTo, Wait,
};

use crate::pubsub::DEFAULT_ROUTER;
use tickwire_rt::text::count;

/// Exit status of `request` when nobody is subscribed to the topic.
const EXIT_NO_RESPONDERS: u8 = 5;
/// Exit status of `request` when no reply came in time.
const EXIT_TIMEOUT: u8 = 3;
/// Exit status of `request` when the reply is a failure report (it begins with
/// [`FAILED_PREFIX`]).
const EXIT_FAILED_ANSWER: u8 = 4;

/// How a reply that reports a failure begins: what `reply --exec` answers when its
/// command fails. The protocol has no status on a reply (docs/protocol.md 5.1), so the
/// failure is told in the payload, as text a person reads too.
const FAILED_PREFIX: &[u8] = b"error: ";

const REQUEST_HELP: &str = "\
Sends MESSAGE to TOPIC as a request and prints the first reply's payload. The request
carries a reply topic unique to this connection and a correlation id; a responder
(`tickwire reply`, or Client::reply in a program) publishes its answer there.

A reply that begins with 'error: ' reports a failure (what `tickwire reply --exec`
answers when its command fails, or cannot run, or runs too long): it goes to standard
error instead of standard output, and the exit status is 4. (The protocol carries no
status on a reply; this is the convention of `tickwire reply`. A responder echoing a
request that begins with 'error: ' is taken for a failure too.)

Exit status: 0 a reply was printed; 3 no reply within --timeout; 4 the reply reports
a failure ('error: ...'); 5 no responders (no subscription on the router matches TOPIC:
the router says so at once); 1 another error (the router not answering its own part,
the reply inbox's subscription, within --timeout among them); 2 a usage error (bad flag
or topic).

Examples:
  tickwire request svc/time now                    # ask, print the answer
  tickwire request svc/quote AAPL --timeout 500ms
  tickwire request svc/nobody x; echo $?           # 5: no responders";

#[derive(Args)]
#[command(after_help = REQUEST_HELP)]
pub struct RequestArgs {
    /// Router address: HOST:PORT, tls://HOST:PORT (with --ca), or shm:NAME for shared
    /// memory on this host.
    #[arg(long, default_value = DEFAULT_ROUTER, value_name = "ADDR", value_parser = crate::units::parse_router_addr)]
    router: String,
    #[command(flatten)]
    login: crate::login::LoginArgs,
    /// Topic of the request, e.g. svc/time.
    #[arg(value_parser = crate::units::parse_topic)]
    topic: String,
    /// Request payload, sent as its bytes (UTF-8 or not).
    #[arg(value_parser = clap::value_parser!(std::ffi::OsString))]
    message: std::ffi::OsString,
    /// How long to wait for a reply (more than 0).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, default_value = "5s")]
    timeout: Duration,
    /// Client name shown in the router's stats.
    #[arg(long, default_value = "tickwire-request", value_parser = crate::units::parse_client_name)]
    name: String,
    /// Where the reply topic lives: PREFIX/<client id>/<nonce> [default: _reply/user/USER
    /// with --user, else _reply]. A user whose rules allow it to read its replies only
    /// under some prefix (a token or certificate login, whose user the client does not
    /// know) passes it here, e.g. --inbox-prefix _reply/user/pricer.
    #[arg(long, value_name = "PREFIX", value_parser = crate::units::parse_topic)]
    inbox_prefix: Option<String>,
}

/// A request timeout: a duration above zero. Zero would race the reply against the
/// clock (sometimes a reply, mostly a timeout), so it is a usage error.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    match crate::units::parse_duration(s)? {
        Duration::ZERO => Err(format!(
            "{s:?}: the timeout must be positive (e.g. 500ms, 5s)"
        )),
        d => Ok(d),
    }
}

/// A shell command for --exec: not blank (new-user pass: `--exec ''` answered every
/// request with an empty success).
fn parse_command(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err(
            "an empty command: give the shell command to run per request, \
                    e.g. --exec 'date -u'"
                .to_owned(),
        );
    }
    Ok(s.to_owned())
}

/// What `Client::request` says it waited for when no reply came.
const REPLY_WAIT: &str = tickwire_client::REQUEST_REPLY_WAIT;

pub fn run_request(a: RequestArgs) -> anyhow::Result<ExitCode> {
    let mut opts = a
        .login
        .apply(&a.router, ClientOptions::named(a.name.clone()))?;
    // The router's own answers on the way (the ACK of the reply inbox's subscription)
    // are waited for no longer than the reply: a router that does not answer is not
    // waited for 5 s by a request of --timeout 1s.
    opts.request_timeout = opts.request_timeout.min(a.timeout);
    opts.inbox_prefix = a.inbox_prefix.clone();
    let mut c = Client::connect_to(a.router.as_str(), opts)?;
    match c.request(
        &a.topic,
        std::os::unix::ffi::OsStrExt::as_bytes(a.message.as_os_str()),
        a.timeout,
    ) {
        Ok(reply) if reply.payload.starts_with(FAILED_PREFIX) => {
            // The responder's text, on the terminal: control characters escaped (a
            // line break could forge a line, an escape sequence drive the terminal).
            let text = String::from_utf8_lossy(&reply.payload);
            let mut err = std::io::stderr().lock();
            for line in text.lines() {
                writeln!(err, "{}", tickwire_rt::text::terminal_safe(line))?;
            }
            c.close().ok();
            Ok(ExitCode::from(EXIT_FAILED_ANSWER))
        }
        Ok(reply) => {
            let mut out = std::io::stdout().lock();
            out.write_all(&reply.payload)?;
            if !reply.payload.ends_with(b"\n") {
                out.write_all(b"\n")?;
            }
            out.flush()?;
            c.close().ok();
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ Error::NoResponders { .. }) => {
            eprintln!("{e}");
            Ok(ExitCode::from(EXIT_NO_RESPONDERS))
        }
        // Status 3 is for the reply; a router that does not answer its own part (the
        // reply inbox's subscription) is another error (1).
        Err(e @ Error::Timeout { what, .. }) if what == REPLY_WAIT => {
            eprintln!("no reply: {e}");
            Ok(ExitCode::from(EXIT_TIMEOUT))
        }
        // New-user pass: a request refused for its reply inbox named an internal topic
        // and no way out.
        Err(e)
            if matches!(&e, Error::Rejected { code, text }
                if *code == ErrorCode::PERMISSION_DENIED && text.contains("subscribe to")) =>
        {
            // The user's own inbox when its name is one topic level (the client's
            // default prefix for it then), else the general form.
            let own = a
                .login
                .user()
                .filter(|u| tickwire_client::validate_group(u).is_ok())
                .map(|u| {
                    format!(
                        "this user's subscribe rules must allow it: allow `_reply/user/{u}/>` \
                         (its default inbox)"
                    )
                })
                .unwrap_or_else(|| {
                    "the user's subscribe rules must allow it: allow `_reply/user/USER/>` and \
                     log in with --user USER (the inbox's default prefix then is \
                     _reply/user/USER)"
                        .to_owned()
                });
            Err(e).with_context(|| {
                format!(
                    "request to {}: the router refused the reply inbox, the subscription \
                     the reply comes back on: {own}, or pass --inbox-prefix PREFIX for a \
                     `PREFIX/>` the rules allow (docs/security.md, \"Requests and replies\")",
                    a.topic
                )
            })
        }
        Err(e) => Err(e).with_context(|| format!("request to {}", a.topic)),
    }
}

const REPLY_HELP: &str = "\
Answers requests on the topics matching PATTERN: by default with the request's own
payload (echo); with --exec CMD, by running CMD with `sh -c` once per request, the
request payload on its standard input, and replying with its standard output (at most
--max-reply bytes; a longer output, or one the router's max frame cannot carry, is
answered as a failure, 'error: ... wrote N bytes, more than --max-reply ...', with a
warning on standard error giving both sizes: a cut answer would read as whole). A command that fails (non-zero exit status, or it cannot be run, or
it runs past --exec-timeout) is answered with 'error: ', its exit status and its
standard error; `tickwire request` then exits with status 4 and prints that answer on
standard error, and this command warns on standard error ('warning: ... failed') with
the status and the start of the command's standard error.
An answer is also cut to what fits in one frame of the router's max frame (its
--max-frame, less room for the reply topic): the command then warns on standard error
with both sizes, and the line per request gives the bytes actually sent.
Messages that are not requests are ignored. A line per request goes to standard error
unless --quiet. Requests are answered one at a time, in the order they arrive: with a
slow --exec command, later requests wait for the earlier ones (run several `tickwire
reply --group NAME` to answer in parallel: each request goes to one of them).
An answer the router refuses (a user without allow_responses or publish rights on the
reply topics, docs/security.md) is warned about on standard error and counted in the
summary; the command goes on answering (its requester times out).

Several `tickwire reply` on one pattern each answer every request; the requester keeps
the first reply.

Reconnecting: the first connection must succeed; after that, when the router restarts
or the connection drops, the command says so on standard error, reconnects (with
exponential backoff and jitter, for as long as it takes unless --give-up-after bounds
the wait; --no-reconnect exits instead), subscribes again and goes on answering.
Requests in flight when the connection dropped are not answered (their requesters time
out or see their own connection go).

Stopping: Ctrl-C (or SIGTERM) stops it (status 0): the requests already received are
answered, standard error gets the summary ('answered N requests on PATTERN in S s',
with how many answers reported a failed command and how many requests went unanswered),
and the connection is closed. Once stopping it does not reconnect. A second Ctrl-C
aborts at once. --quiet prints the same summary at the end.

Exit status: 0 stopped by Ctrl-C or after --count answers; 1 the connection lost with
--no-reconnect or the router not reached again within --give-up-after (both after the
summary, with the cause), or another error; 2 a usage error.

Examples:
  tickwire reply 'svc/echo'                        # echo server
  tickwire reply 'svc/time' --exec date            # answer with the date
  tickwire reply 'svc/upper' --exec 'tr a-z A-Z'
  tickwire reply 'svc/>' --count 1                 # answer one request, then exit
  tickwire reply 'svc/price' --group pricers --exec ./price.sh   # one of several";

#[derive(Args)]
#[command(after_help = REPLY_HELP)]
pub struct ReplyArgs {
    /// Router address: HOST:PORT, tls://HOST:PORT (with --ca), or shm:NAME for shared
    /// memory on this host.
    #[arg(long, default_value = DEFAULT_ROUTER, value_name = "ADDR", value_parser = crate::units::parse_router_addr)]
    router: String,
    #[command(flatten)]
    login: crate::login::LoginArgs,
    /// Pattern of the request topics to answer, e.g. 'svc/time' or 'svc/>'.
    #[arg(value_parser = crate::units::parse_pattern)]
    pattern: String,
    /// Answer as one member of the shared group NAME: each request goes to one member of
    /// the group (`tickwire reply --group NAME` several times answers in parallel). The
    /// same as PATTERN '$share/NAME/PATTERN'.
    #[arg(long, value_name = "NAME", value_parser = crate::pubsub::parse_group)]
    group: Option<String>,
    /// Run this shell command per request (payload on stdin, reply from stdout; a command
    /// that fails is answered with "error: ", its exit status and its stderr, which
    /// `tickwire request` reports with exit status 4; a warning says so here).
    #[arg(long, value_name = "CMD", value_parser = parse_command)]
    exec: Option<String>,
    /// Exit after answering this many requests (at least 1).
    #[arg(long, value_name = "N", value_parser = crate::units::parse_count)]
    count: Option<u64>,
    /// Kill an --exec command still running after this long (the reply then says so).
    /// The default stays under `tickwire request`'s default --timeout (5s), so such a
    /// requester gets that answer rather than a timeout; raise both together.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration, default_value = "4s")]
    exec_timeout: Duration,
    /// Largest reply sent from --exec output, in bytes (the rest is cut); the router's
    /// max frame cuts a larger answer too, with a warning.
    #[arg(long, value_name = "BYTES", value_parser = crate::units::parse_size, default_value = "64KiB")]
    max_reply: usize,
    /// Print nothing per request.
    #[arg(long)]
    quiet: bool,
    /// Client name shown in the router's stats.
    #[arg(long, default_value = "tickwire-reply", value_parser = crate::units::parse_client_name)]
    name: String,
    /// Exit when the connection is lost instead of reconnecting.
    #[arg(long)]
    no_reconnect: bool,
    /// Exit when the router cannot be reached again for this long [default: never].
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_give_up, conflicts_with = "no_reconnect")]
    give_up_after: Option<Duration>,
}

pub fn run_reply(a: ReplyArgs) -> anyhow::Result<ExitCode> {
    // By default it reconnects for as long as it takes: a service outlives its
    // router's restarts.
    let opts = crate::pubsub::link_options(
        &a.router,
        &a.name,
        &a.login,
        a.no_reconnect,
        a.give_up_after,
    )?;
    // A usage error before connecting (new-user pass: it came after).
    let pattern = match &a.group {
        Some(g) => crate::pubsub::grouped(g, &a.pattern)?,
        None => a.pattern.clone(),
    };
    let mut c = ReconnectingClient::connect(&a.router, opts)?;
    c.subscribe(&pattern)
        .with_context(|| format!("subscribing to {pattern:?}"))?;
    // Live from here: said once (new-user pass: silent until the first request).
    if !a.quiet {
        eprintln!(
            "answering requests on {} at {} (Ctrl-C to stop)",
            tickwire_rt::text::terminal_safe(&pattern),
            a.router
        );
    }
    let limit = a.count.unwrap_or(u64::MAX);
    let mut tally = ReplyTally::default();
    let started = Instant::now();
    // Requests of one poll; answered after it (a message borrows the client).
    let mut batch: Vec<(String, ReplyTo, Vec<u8>)> = Vec::new();
    let mut lost = None;
    // Ctrl-C (or SIGTERM) ends the loop at its next poll: the requests at hand are
    // answered, the summary printed and the connection closed (a second Ctrl-C aborts).
    // Once stopping, it polls no more (so never reconnects).
    let stop = tickwire_rt::StopFlag::install_saying(
        "stopping: answering the requests at hand, then the summary (Ctrl-C again to abort)",
    );
    while tally.answered < limit && !stop.is_set() {
        // Without a connection a poll reconnects when an attempt is due; the pause
        // between attempts is slept here, in steps that notice Ctrl-C (as `sub`).
        let connected = c.is_connected();
        let wait = match connected {
            true => Wait::Timeout(Duration::from_millis(200)),
            false => Wait::NoWait,
        };
        let polled = c.poll(wait, |ev| match ev {
            LinkEvent::Message(m) => {
                if let Some(to) = m.reply_target() {
                    // Shown in this command's lines: control characters escaped.
                    let topic = tickwire_rt::text::terminal_safe(m.topic()).into_owned();
                    batch.push((topic, to, m.payload().to_vec()));
                }
            }
            LinkEvent::Disconnected { reason } if a.no_reconnect => {
                lost = Some(reason.to_owned());
            }
            // Stopping: the router going away now is no news.
            _ if stop.is_set() => {}
            other => crate::pubsub::report_link(&other),
        });
        match polled {
            // An answer the router refused (non-fatal `PERMISSION_DENIED`: no right to
            // publish to the reply topic): the connection goes on, and so does the
            // service; its requester gets no answer and times out. Only on a connection
            // that was up before the poll and still is: a refusal from a reconnection
            // (its subscription refused by a restarted router's rules) ends the command
            // with its cause, as before (going on would reconnect without a pause).
            Err(e @ Error::Rejected { .. }) if connected && c.is_connected() => {
                tally.refused += 1;
                eprintln!(
                    "warning: the router refused an answer: {e}; its requester gets no \
                     reply. A responder needs allow_responses = true (or publish rights on \
                     _reply/>) in the router's [auth] rules (docs/security.md)"
                );
            }
            Err(e) => {
                // The summary, then the cause (as `sub`): --give-up-after ran out, or
                // another error.
                tally.report(&pattern, started);
                return Err(crate::pubsub::poll_failed(
                    e,
                    a.give_up_after,
                    c.is_connected(),
                ));
            }
            Ok(0) if !connected && !c.is_connected() => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(_) => {}
        }
        if let Some(reason) = lost.take() {
            // As `sub --no-reconnect`: the connection's end is the command's end, a
            // failure (status 1) after the summary.
            tally.report(&pattern, started);
            anyhow::bail!("{reason} (--no-reconnect)");
        }
        for (topic, to, payload) in batch.drain(..) {
            if tally.answered >= limit {
                break;
            }
            let answer = match &a.exec {
                None => Answer {
                    payload,
                    failure: None,
                    cut_from: None,
                },
                Some(cmd) => run_exec(cmd, &payload, a.max_reply, a.exec_timeout),
            };
            if let Some(wrote) = answer.cut_from {
                // New-user pass: a 168,894-byte output reached the requester as
                // 65,536 bytes, cut mid-number, with nothing said; then as a success.
                eprintln!(
                    "warning: --exec command wrote {wrote} bytes for a request on {topic}, \
                     more than --max-reply {} bytes: answered with an error instead",
                    a.max_reply
                );
            } else if let Some(why) = &answer.failure {
                eprintln!("warning: --exec command failed on a request on {topic}: {why}");
            }
            // The connection the request came on may be gone (its requester is then
            // gone with it, or times out); the next poll reconnects.
            let Some(conn) = c.client() else {
                eprintln!("request on {topic} not answered: the connection was lost");
                tally.unanswered += 1;
                continue;
            };
            // What the reply's frame leaves for the answer: the header, the reply
            // topic and the REPLY field (its correlation; no reply-to in a reply).
            let max_frame = conn.router_max_frame();
            let overhead = tickwire_wire::frame::HEADER_LEN + to.topic.len() + 5;
            let max = (max_frame as usize).saturating_sub(overhead);
            // An answer the router's frame cannot hold is answered as a failure, not
            // cut (a cut answer read as a success).
            let mut answer = answer;
            if answer.payload.len() > max {
                eprintln!(
                    "warning: answer of {} bytes on {topic} does not fit the router's max \
                     frame of {max_frame} bytes: answered with an error instead",
                    answer.payload.len()
                );
                let mut e = format!(
                    "error: the answer of {} bytes does not fit the router's max frame of \
                     {max_frame} bytes: none of it sent",
                    answer.payload.len()
                )
                .into_bytes();
                e.truncate(max);
                answer.payload = e;
                answer.failure.get_or_insert_with(|| "too large".to_owned());
            }
            let sent = answer.payload.len();
            if let Err(e) = conn.reply(&to, &answer.payload[..sent]) {
                eprintln!("request on {topic} not answered: {e}");
                tally.unanswered += 1;
                continue;
            }
            tally.answered += 1;
            if answer.failure.is_some() {
                tally.failed += 1;
            }
            if !a.quiet {
                let size = tickwire_rt::text::count(sent as u64, "byte", "bytes");
                match answer.failure {
                    Some(_) => eprintln!(
                        "answered a request on {topic} with the command's failure ({size})"
                    ),
                    None => eprintln!("answered a request on {topic} ({size})"),
                }
            }
        }
        // The answers written; without a connection there are none, and a flush
        // would try to reconnect outside the poll (and its --give-up-after wording).
        if c.is_connected() {
            if let Err(e) = c.flush() {
                if a.quiet {
                    tally.report(&pattern, started);
                }
                return Err(crate::pubsub::poll_failed(
                    e,
                    a.give_up_after,
                    c.is_connected(),
                ));
            }
        }
    }
    if a.quiet || stop.is_set() {
        tally.report(&pattern, started);
    }
    c.close().ok();
    Ok(ExitCode::SUCCESS)
}

/// What `reply` counts for its summary.
#[derive(Default)]
struct ReplyTally {
    answered: u64,
    /// Answers that report a failed --exec command ('error: ...').
    failed: u64,
    /// Requests not answered: the connection was lost, or the reply refused.
    unanswered: u64,
    /// Answers sent and then refused by the router (no right to reply): counted in
    /// `answered` when sent, refused after.
    refused: u64,
}

impl ReplyTally {
    /// The summary on standard error (Ctrl-C, or the end with --quiet).
    fn report(&self, pattern: &str, started: Instant) {
        let mut s = format!(
            "answered {} on {pattern} in {:.3} s",
            count(self.answered, "request", "requests"),
            started.elapsed().as_secs_f64()
        );
        if self.failed > 0 {
            s += &format!(
                " ({} the failure of the --exec command)",
                count(self.failed, "answer told", "answers told")
            );
        }
        if self.unanswered > 0 {
            s += &format!(
                "; {} not answered",
                count(self.unanswered, "request", "requests")
            );
        }
        if self.refused > 0 {
            s += &format!(
                "; {} refused by the router (no right to reply)",
                count(self.refused, "answer", "answers")
            );
        }
        eprintln!("{s}");
    }
}

/// An answer to one request: its payload and, when it reports a failed --exec command,
/// what failed (for the responder's warning).
struct Answer {
    payload: Vec<u8>,
    failure: Option<String>,
    /// The command wrote this many bytes, more than --max-reply: the answer is cut.
    cut_from: Option<u64>,
}

/// The first line of a command's standard error, at most 200 characters, for a warning.
fn excerpt(err: &[u8]) -> String {
    let text = String::from_utf8_lossy(err);
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut cut: String = line.chars().take(200).collect();
    if cut.len() < line.len() || text.lines().filter(|l| !l.trim().is_empty()).count() > 1 {
        cut.push_str(" ...");
    }
    cut
}

/// Runs `cmd` with `input` on its stdin; its stdout (or, when it fails, "error: " and
/// its stderr, with the failure told in [`Answer::failure`]), cut to `max` bytes. Stdin is written and stderr read on their own
/// threads, so a command that writes before it has read all its input, or that writes a
/// lot to stderr, cannot deadlock with us; what is beyond `max` is read and dropped so the
/// command can finish. A command still running after `timeout` is killed and the reply
/// says so.
fn run_exec(cmd: &str, input: &[u8], max: usize, timeout: Duration) -> Answer {
    let failed = |why: String| Answer {
        payload: why.clone().into_bytes(),
        failure: Some(why.trim_start_matches("error: ").to_owned()),
        cut_from: None,
    };
    // Its own process group: a terminal's Ctrl-C goes to the foreground group, and
    // killed with us the command left the request it was answering unanswered (new-user
    // pass); `reply` stops after answering it, as promised.
    let child = Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return failed(format!("error: cannot run {cmd:?}: {e}")),
    };
    let stdin = child.stdin.take();
    let input = input.to_vec();
    // A command that does not read its input closes the pipe early: not an error.
    let writer = std::thread::spawn(move || {
        if let Some(mut stdin) = stdin {
            stdin.write_all(&input).ok();
        }
    });
    let (err_tx, err_rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take();
    std::thread::spawn(move || err_tx.send(read_bounded(stderr, max)));
    let (out_tx, out_rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take();
    std::thread::spawn(move || out_tx.send(read_bounded(stdout, max)));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if Instant::now() >= deadline => {
                // The whole group it leads (`sh` and what it started: `slow | filter`),
                // which no terminal's Ctrl-C reaches any more (review).
                let group = rustix::process::Pid::from_child(&child);
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
                child.kill().ok();
                child.wait().ok();
                break Err(format!(
                    "error: {cmd:?} still running after {timeout:?}: killed"
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => break Err(format!("error: waiting for {cmd:?}: {e}")),
        }
    };
    // The pipes close when the command and whatever it started exit; a background
    // process that keeps them open is not waited for past the deadline (its reader
    // thread is left to finish on its own).
    let rest = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100))
    };
    let (out, wrote) = out_rx.recv_timeout(rest()).unwrap_or_default();
    let (err, _) = err_rx.recv_timeout(rest()).unwrap_or_default();
    drop(writer);
    match status {
        // An output longer than --max-reply is answered as a failure, not cut: a cut
        // answer (half a JSON document) reached the requester as a success (new-user
        // pass).
        Ok(st) if st.success() && wrote > out.len() as u64 => Answer {
            payload: format!(
                "error: {cmd:?} wrote {wrote} bytes, more than --max-reply {max}: none of it \
                 sent"
            )
            .into_bytes(),
            failure: Some(format!(
                "{cmd:?} wrote {wrote} bytes, more than --max-reply {max}"
            )),
            cut_from: Some(wrote),
        },
        Ok(st) if st.success() => Answer {
            cut_from: None,
            payload: out,
            failure: None,
        },
        Ok(st) => {
            let mut e = format!("error: {cmd:?} {st}").into_bytes();
            // A command that failed without a word: no dangling ": ".
            let said = !err.trim_ascii().is_empty();
            if said {
                e.extend_from_slice(b": ");
                e.extend_from_slice(&err);
            }
            e.truncate(max);
            Answer {
                payload: e,
                failure: Some(match said {
                    true => format!("{cmd:?} {st}: {}", excerpt(&err)),
                    false => format!("{cmd:?} {st} (nothing on its standard error)"),
                }),
                cut_from: None,
            }
        }
        Err(e) => failed(e),
    }
}

/// Up to `max` bytes of `r`, and how many it gave in all; the rest is read and dropped.
fn read_bounded(r: Option<impl Read>, max: usize) -> (Vec<u8>, u64) {
    let mut out = Vec::new();
    let mut dropped = 0;
    if let Some(r) = r {
        let mut taken = r.take(max as u64);
        taken.read_to_end(&mut out).ok();
        dropped = std::io::copy(&mut taken.into_inner(), &mut std::io::sink()).unwrap_or(0);
    }
    let all = out.len() as u64 + dropped;
    (out, all)
}
