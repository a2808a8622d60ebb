//! `tickwire pub` and `tickwire sub`.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use tickwire_client::{
    ClientOptions, ErrorCode, GuaranteedPublisher, LinkEvent, QueueConsumer, ReconnectOptions,
    ReconnectingClient, Start, Wait,
};

use crate::units::{parse_rate, parse_size};
use tickwire_rt::text::count;

/// Default router address of every client command.
pub const DEFAULT_ROUTER: &str = "127.0.0.1:7420";

const PUB_HELP: &str = "\
Modes:
  tickwire pub TOPIC MESSAGE                  one message
  tickwire pub TOPIC --stdin                  one message per input line, each sent
                                              as soon as it is read (lines read
                                              together go out together)
  tickwire pub TOPIC --count N --size B --rate R
                                              load: N messages of B bytes at R msg/s,
                                              each sent at its time (rate 0 = as fast
                                              as possible, batched); prints the
                                              achieved rate (over the intervals from
                                              the first message to the last; none
                                              under 10 ms); R is whole msg/s
  tickwire pub TOPIC MESSAGE --count N        the same message N times

Topics are levels separated by '/', e.g. md/NASDAQ/AAPL (no '*' or '>').

Reconnecting: the first connection must succeed; after that, when the router restarts
or the connection drops, the command reconnects with exponential backoff and jitter
(for up to --give-up-after) and goes on, on its schedule. Messages published while
disconnected are kept (up to --offline-buffer, 1 MiB by default) and sent after the
reconnection; once that buffer is full, the rest are dropped and counted until the
connection is back. Messages that were in flight when the connection dropped may be
lost too (direct messaging is not guaranteed; --guaranteed keeps and resends every
message). Standard error tells of each loss ('disconnected: ...; reconnecting'), of the
first message dropped, and of the return ('reconnected after ...'); the summary at the
end says how many messages were sent and how many dropped. --no-reconnect exits on a
lost connection instead.
  Exit status (direct publishing): 0 every message sent (those published while
disconnected kept and sent after reconnecting); 5 some were dropped while disconnected
(offline buffer full; takes precedence over 130); 130 stopped by Ctrl-C before the last
message (or, with --stdin, before the end of the input); 1 another error (the router
refused the publishes: the user may not publish to TOPIC, said within ~10 ms of the
schedule (unpaced: 8192 messages; --stdin: 256 lines or when input pauses) and at the
end, which one round trip to the router confirms; the router not reached again
within --give-up-after, the connection lost with --no-reconnect, ...); 2 a usage
error.

Stopping: Ctrl-C (or SIGTERM) during --count or --stdin stops publishing (--stdin stops
reading its input at once, even while no line comes; a partly read line is dropped);
what was published is sent (or, with --guaranteed, answered: the command waits for the
answers, up to --answer-timeout), the summary printed, and the exit status is 130
(unless, with --guaranteed, answers are missing: 4). With --guaranteed, a connection
lost while stopping is not reconnected (what it leaves unanswered is counted: exit 4).
A second Ctrl-C aborts at once.

Guaranteed (--guaranteed): the router stores every message (durably, per its --sync)
in each queue whose subscriptions match its topic (`tickwire queue create NAME --sub
PATTERN`), and only then acknowledges it: 'acknowledged' means stored. A message that matches no
queue is stored nowhere, so the router refuses it (NACK no-matching-queue; direct
subscribers still get it), and the summary says which queue to create; with
--allow-no-queue the router acknowledges such a message instead, storing it nowhere.
The command waits (up to --answer-timeout) for every answer and prints a summary: how
many were acknowledged and how many the router refused (NACK), by reason. When the
router restarts or the connection drops, it says so ('disconnected: ...; reconnecting'),
reconnects (for up to --give-up-after), re-opens and resends every unanswered message
('reconnected after S s (A attempts): publisher re-opened, N unanswered messages resent'); the router
never stores one twice. While the window of unanswered messages is full (the router's
publish_window, 4096 by default), publishing waits for answers; a router that sends none
for 5 s (hung, or stopped with SIGSTOP) is taken as lost the same way, so a load against
it ends after --give-up-after with status 1, not 4: --answer-timeout is the wait after
the last publish.
  The publisher identity (--identity) names the sequence numbers the router uses to
recognise a resend. Its default, 'tickwire-pub:TOPIC', is stable, so a command re-run
after a crash continues the same sequence; two commands publishing to the same topic
at the same time need different identities (a second open of an identity takes it
over and the first command fails with taken-over).
  Exit status: 0 every message acknowledged; 3 some were refused (NACK, e.g. no queue
matched); 4 some were still unanswered when --answer-timeout ran out (takes precedence
over 3); 130 stopped by Ctrl-C before the last message (or, with --stdin, before the
end of the input); 1 another error (no router
within --give-up-after, identity taken over, ...).

Examples:
  tickwire pub orders/new 'buy 100 AAPL' --guaranteed
  tickwire pub orders/new --stdin --guaranteed --identity orders-gw-1 < orders.txt
  tickwire pub orders/new --count 100000 --size 200 --guaranteed   # survives a router restart";

#[derive(Args)]
#[command(after_help = PUB_HELP)]
pub struct PubArgs {
    /// Router address: HOST:PORT, tls://HOST:PORT (with --ca), or shm:NAME for shared
    /// memory on this host.
    #[arg(long, default_value = DEFAULT_ROUTER, value_name = "ADDR", value_parser = crate::units::parse_router_addr)]
    router: String,
    #[command(flatten)]
    login: crate::login::LoginArgs,
    /// Topic to publish to, e.g. md/NASDAQ/AAPL.
    #[arg(value_parser = crate::units::parse_topic)]
    topic: String,
    /// Message text (omit with --stdin or a load run). Sent as its bytes, exactly: any
    /// byte string the shell can pass works, UTF-8 or not.
    #[arg(value_parser = clap::value_parser!(std::ffi::OsString))]
    message: Option<std::ffi::OsString>,
    /// Publish one message per line read from standard input.
    #[arg(long, conflicts_with = "message")]
    stdin: bool,
    /// Number of messages to send (load mode; at least 1). Not with --stdin, which
    /// sends one message per line until its input ends.
    #[arg(long, value_name = "N", value_parser = crate::units::parse_count, conflicts_with = "stdin")]
    count: Option<u64>,
    /// Payload size in bytes for load mode (e.g. 100, 4K) [default: 100]. A size whose
    /// frame (header and topic included) exceeds the router's max frame is refused
    /// before anything is allocated or sent.
    #[arg(long, value_name = "BYTES", value_parser = parse_size, conflicts_with_all = ["message", "stdin"])]
    size: Option<usize>,
    /// Messages per second in load mode (e.g. 10000, 50k, 1M); 0 = as fast as possible.
    /// Not with --stdin (its lines go out as they are read).
    #[arg(long, value_name = "RATE", value_parser = parse_rate, default_value = "0", conflicts_with = "stdin")]
    rate: u64,
    /// Client name shown in the router's stats.
    #[arg(long, default_value = "tickwire-pub", value_parser = crate::units::parse_client_name)]
    name: String,
    /// Guaranteed publishing: stored and acknowledged by the router (see below).
    #[arg(long)]
    guaranteed: bool,
    /// Publisher identity for --guaranteed (1 to 64 bytes) [default: tickwire-pub:TOPIC].
    #[arg(long, value_name = "NAME", requires = "guaranteed", value_parser = parse_identity)]
    identity: Option<String>,
    /// With --guaranteed: let the router acknowledge a message that matches no queue
    /// (it stores it nowhere) instead of refusing it (no-matching-queue, exit 3).
    #[arg(long, requires = "guaranteed")]
    allow_no_queue: bool,
    /// With --guaranteed: how long to wait for the last answers after the last publish.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration, default_value = "30s", requires = "guaranteed")]
    answer_timeout: Duration,
    /// Give up when the router cannot be reached for this long (after a lost
    /// connection; the first must succeed).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_give_up, default_value = "60s")]
    give_up_after: Duration,
    /// Exit on a lost connection instead of reconnecting (direct publishing).
    #[arg(long, conflicts_with = "guaranteed")]
    no_reconnect: bool,
    /// Direct publishing: most bytes (topics and payloads) kept while disconnected and
    /// sent after reconnecting (e.g. 64K, 16M); beyond it messages are dropped and
    /// counted.
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value = "1M", conflicts_with = "guaranteed")]
    offline_buffer: usize,
}

/// Exit status of `pub --guaranteed` when the router refused some messages.
const EXIT_NACKED: u8 = 3;
/// Exit status of `pub --guaranteed` when answers were missing at the timeout.
const EXIT_UNANSWERED: u8 = 4;
/// Exit status of a direct `pub` that dropped messages while disconnected (its offline
/// buffer full).
const EXIT_DROPPED: u8 = 5;
/// Exit status of `pub` stopped by Ctrl-C (or SIGTERM) before its last message, as a
/// shell reports a command that SIGINT ended.
const EXIT_STOPPED: u8 = 130;

/// A note when `pub`'s two arguments look swapped (`pub 'bid 1' md/X`: a topic with
/// a space and a message that looks like a topic): it is still published as asked (a
/// topic may hold spaces), but a new user learns the order (new-user pass).
/// `flags` are the command's connection flags (`LoginArgs::repeat_flags`), for the
/// command it suggests.
fn swapped_arguments(topic: &str, message: Option<&str>, flags: &str) -> Option<String> {
    let message = message?;
    let looks_like_topic = |t: &str| {
        t.contains('/')
            && !t.contains(char::is_whitespace)
            && tickwire_wire::topic::validate_topic(t.as_bytes()).is_ok()
    };
    (topic.contains(char::is_whitespace) && !topic.contains('/') && looks_like_topic(message)).then(
        || {
            format!(
                "note: publishing to the topic {topic:?} the message {message:?}; the topic comes \
                 first (tickwire pub TOPIC MESSAGE): did you mean `tickwire pub {message} \
                 {topic:?}{flags}`?"
            )
        },
    )
}

pub fn run_pub(a: PubArgs) -> anyhow::Result<ExitCode> {
    // Checked before connecting: a usage error, not a connection one.
    if !a.stdin && a.message.is_none() && a.size.is_none() && a.count.is_none() {
        return Err(nothing_to_publish());
    }
    // The protocol's own bound (a frame length is a u32), before connecting; the
    // router's max frame is checked once connected, still before the payload is built.
    if let Some(size) = a.size {
        check_load_size(size, &a.topic, a.guaranteed, u32::MAX)?;
    }
    if let Some(note) = swapped_arguments(
        &a.topic,
        a.message.as_deref().and_then(|m| m.to_str()),
        &a.login.repeat_flags(&a.router),
    ) {
        eprintln!("{note}");
    }
    // (--rate with --stdin is a usage error.)
    if a.rate > 0 && a.count.is_none() {
        // New-user pass: `pub t/x hello --rate 10` sent one message and said nothing.
        eprintln!(
            "note: --rate paces the --count messages of load mode; ignored here (one \
             message)"
        );
    }
    if a.guaranteed {
        return run_pub_guaranteed(a);
    }
    let opts = ReconnectOptions {
        offline_buffer_bytes: a.offline_buffer,
        ..link_options(
            &a.router,
            &a.name,
            &a.login,
            a.no_reconnect,
            Some(a.give_up_after),
        )?
    };
    let mut client = ReconnectingClient::connect(&a.router, opts)?;
    let mut drops = Drops::new(a.offline_buffer, a.no_reconnect);
    if a.stdin {
        let max_frame = client.client().map_or(u32::MAX, |c| c.router_max_frame());
        let stop = tickwire_rt::StopFlag::install_saying(
            "stopping: sending what was read, then the summary (Ctrl-C again to abort)",
        );
        let read = each_line(max_frame, &stop, |text, caught_up| {
            drops.publish(&mut client, &a.topic, text)?;
            if caught_up {
                client.flush()?;
            }
            if caught_up || drops.taken % REFUSAL_CHECK_EVERY == 0 {
                check_refused(&mut client, &mut drops)?;
            }
            client.take_notices(|ev| drops.notice(&ev));
            Ok(())
        });
        if stop.is_set() {
            // As for --count: no reconnecting once stopping.
            client.stop_reconnecting();
        }
        // The lines before one that could not be published still go out.
        let finished = finish_publishing(&mut client, &mut drops)
            .and_then(|()| confirm_publishing(&mut client, &mut drops));
        let (lines, stopped) = match &read {
            Ok(r) => (r.lines, r.stopped),
            Err(_) => (drops.taken + drops.dropped, false),
        };
        let n = count(drops.taken, "message", "messages");
        let of = match drops.dropped {
            0 => String::new(),
            _ => format!(" of {lines}"),
        };
        let refused =
            refused_whole(finished.as_ref().err()).then(|| refused_line(drops.taken, &a.topic));
        match (stopped, read.is_err() || finished.is_err()) {
            // Said once, with the router's reason, as the error (new-user pass: a line
            // here and the error after it said the same twice).
            _ if refused.is_some() => {}
            (_, true) => eprintln!("ended early: sent {n}{of} to {}", a.topic),
            (true, false) => eprintln!(
                "stopped ({}): published {n}{of} to {}",
                tickwire_rt::stop::stopped_by(),
                a.topic
            ),
            (false, false) => eprintln!("published {n}{of} to {}", a.topic),
        }
        drops.report();
        report_outages(&client, a.no_reconnect);
        let e = read.err().or(finished.err());
        return pub_end(client, &a, &drops, stopped, e, refused);
    }
    let max_frame = client.client().map_or(u32::MAX, |c| c.router_max_frame());
    let payload = payload_of(&a, max_frame)?;
    let total = a.count.unwrap_or(1);
    let stop = tickwire_rt::StopFlag::install_saying(
        "stopping: sending what was published, then the summary (Ctrl-C again to abort)",
    );
    let start = tickwire_rt::MonoNanos::now();
    // Paced: a look every ~10 ms of the schedule (a slow publisher over shared memory
    // hears of a dead router from this look alone); unpaced, per REFUSAL_CHECK_EVERY.
    let check_every = match a.rate {
        // Each look flushes what is batched: unpaced, rarely enough for batches to
        // stay near --batch-bytes (every 256 made ~8 KB writes of 64 KB).
        0 => UNPACED_CHECK_EVERY,
        r => (r / 100).clamp(1, REFUSAL_CHECK_EVERY),
    };
    let paced = pace(
        total,
        a.rate,
        start,
        &stop,
        &mut client,
        |c| c.flush(),
        |c, i| {
            drops.publish(c, &a.topic, &payload)?;
            if i % check_every == check_every - 1 {
                check_refused(c, &mut drops)?;
            }
            c.take_notices(|ev| drops.notice(&ev));
            Ok(())
        },
    );
    let elapsed = tickwire_rt::MonoNanos::now().duration_since(start);
    if stop.is_set() {
        // Stopping: what is left goes to this connection or not at all (a hung router
        // must not keep a supervisor's stop waiting through --give-up-after).
        client.stop_reconnecting();
    }
    let finished = match paced {
        Ok(_) => client
            .flush()
            .map_err(anyhow::Error::from)
            .and_then(|()| finish_publishing(&mut client, &mut drops))
            .and_then(|()| confirm_publishing(&mut client, &mut drops)),
        Err(e) => Err(e),
    };
    // Messages taken (sent, or kept to be sent) or dropped: those the schedule reached.
    let done = drops.taken + drops.dropped;
    // Kept while disconnected and never sent: the command gave up first.
    let unsent = client.offline_buffered().1 as u64;
    // One message without --count goes quietly (`pub TOPIC MESSAGE`); asked for with
    // --count, even --count 1 gets its summary (new-user pass: 1 said nothing, 2 did),
    // and so does a load run of one given only --size (it said nothing either).
    let refused = refused_whole(finished.as_ref().err())
        .then(|| refused_line(drops.taken - unsent, &a.topic));
    if refused.is_some() {
        // Said once, with the router's reason, as the error.
    } else if a.count.is_some()
        || a.size.is_some()
        || total > 1
        || done < total
        || drops.dropped > 0
        || unsent > 0
    {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let sent = drops.taken - unsent;
        let of = match (finished.is_err(), done < total, sent < total) {
            (true, _, _) => format!("ended early: {sent} of {total}"),
            (false, true, _) => format!(
                "stopped ({}): published {sent} of {total}",
                tickwire_rt::stop::stopped_by()
            ),
            (false, false, true) => format!("published {sent} of {total}"),
            (false, false, false) => format!("published {total}"),
        };
        eprintln!(
            "{of} {} of {} to {} in {:.3} s{}",
            if total == 1 { "message" } else { "messages" },
            count(payload.len() as u64, "byte", "bytes"),
            a.topic,
            secs,
            pub_rate_text(sent, payload.len(), elapsed)
        );
    }
    drops.report();
    report_outages(&client, a.no_reconnect);
    pub_end(client, &a, &drops, done < total, finished.err(), refused)
}

/// Whether `e` is the router's refusal of the run's topic. It permits a topic to a user
/// or not, so a refusal is of every message of the run (new-user pass: "ended early:
/// 1000 of 1000" read as if they had gone out).
fn refused_whole(e: Option<&anyhow::Error>) -> bool {
    e.is_some_and(|e| {
        matches!(
            e.downcast_ref::<tickwire_client::Error>(),
            Some(tickwire_client::Error::Rejected { code, .. }) if *code == ErrorCode::PERMISSION_DENIED
        )
    })
}

/// The summary of a run the router refused, `n` messages written to `topic` (a
/// reconnecting `pub` may have had some published by an earlier router: review).
fn refused_line(n: u64, topic: &str) -> String {
    // The router's reason follows ("not permitted to publish to ..."): not said twice
    // (new-user pass).
    format!(
        "publishing to {topic} refused by the router ({} written; it drops every message \
         to a topic it does not permit)",
        count(n, "message", "messages")
    )
}

/// The end of a direct `pub`, once its summary is printed: the error that ended it (the
/// router out of reach for longer than --give-up-after, say; headed by `refused`, the
/// summary of a run whose topic the router refused), else the documented exit status.
fn pub_end(
    client: ReconnectingClient,
    a: &PubArgs,
    drops: &Drops,
    stopped: bool,
    failed: Option<anyhow::Error>,
    refused: Option<String>,
) -> anyhow::Result<ExitCode> {
    if let Some(e) = failed {
        let e = match e.downcast::<tickwire_client::Error>() {
            Ok(e) if a.no_reconnect && !client.is_connected() => {
                anyhow::Error::new(e).context("connection lost (--no-reconnect)")
            }
            Ok(e) => poll_failed(e, Some(a.give_up_after), client.is_connected()),
            Err(e) => e,
        };
        // A refusal of the run's topic: the run's summary (`refused_line`) heads the
        // router's reason, in one error line.
        return Err(match refused {
            Some(line) => e.context(line),
            None => e,
        });
    }
    client.close()?;
    if drops.dropped > 0 {
        return Ok(ExitCode::from(EXIT_DROPPED));
    }
    if stopped {
        return Ok(ExitCode::from(EXIT_STOPPED));
    }
    Ok(ExitCode::SUCCESS)
}

/// What a direct `pub` dropped while disconnected with its offline buffer full: such a
/// message is counted and the schedule goes on (direct messaging promises no delivery;
/// refusing to go on would lose every later message too).
struct Drops {
    /// --offline-buffer, for the reports.
    limit: usize,
    /// Messages published, or kept to be sent after a reconnection.
    taken: u64,
    /// Messages dropped, over all outages.
    dropped: u64,
    /// Messages dropped in the outage under way (said at its end).
    in_outage: u64,
    /// --no-reconnect: a lost connection ends the command, so nothing "reconnects".
    no_reconnect: bool,
}

impl Drops {
    fn new(limit: usize, no_reconnect: bool) -> Drops {
        Drops {
            limit,
            taken: 0,
            dropped: 0,
            in_outage: 0,
            no_reconnect,
        }
    }

    /// Publishes, or counts the message dropped when the offline buffer is full (the
    /// first drop of an outage is said).
    fn publish(
        &mut self,
        c: &mut ReconnectingClient,
        topic: &str,
        payload: &[u8],
    ) -> Result<(), tickwire_client::Error> {
        match c.publish(topic, payload) {
            Ok(()) => self.taken += 1,
            Err(tickwire_client::Error::OfflineBufferFull { .. }) => {
                if self.in_outage == 0 {
                    eprintln!(
                        "offline buffer full ({}, --offline-buffer): dropping messages \
                         until reconnected",
                        count(self.limit as u64, "byte", "bytes")
                    );
                }
                self.in_outage += 1;
                self.dropped += 1;
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Reports a connection change ([`report_link`]), with what the outage dropped.
    fn notice(&mut self, ev: &LinkEvent<'_>) {
        if self.no_reconnect && matches!(ev, LinkEvent::Disconnected { .. }) {
            // The error that ends the command says it (with "--no-reconnect").
            return;
        }
        report_link(ev);
        if matches!(ev, LinkEvent::Reconnected(_)) && self.in_outage > 0 {
            eprintln!(
                "  {} dropped during that outage (offline buffer full)",
                count(self.in_outage, "message", "messages")
            );
            self.in_outage = 0;
        }
    }

    /// The summary's line on drops, when there were any.
    fn report(&self) {
        if self.dropped == 0 {
            return;
        }
        eprintln!(
            "{} dropped while disconnected (the offline buffer of {}, --offline-buffer, \
             was full): direct messages are not guaranteed; --guaranteed stores and \
             resends every message",
            count(self.dropped, "message", "messages"),
            count(self.limit as u64, "byte", "bytes"),
        );
    }
}
/// How a pass over standard input ended: how many lines, and whether Ctrl-C stopped it
/// before the end of the input.
struct LinesRead {
    lines: u64,
    stopped: bool,
}

/// Calls `each(line, caught_up)` for every line of standard input (without its line
/// end; any bytes), `caught_up` true when nothing more has been read ahead, i.e. the
/// next line may be a while (a person typing, a `tail -f`) and what was taken should
/// be sent now rather than batched. A line is read up to `max_frame` bytes (the
/// router's largest frame, which no longer line could fit): memory stays bounded
/// whatever the input. Stops at the end of the input or, within 100 ms, once `stop` is
/// set (Ctrl-C): it waits for input with `poll(2)`, so a quiet input (`sleep 8 |`, a
/// terminal) does not hold it; a partial last line is then dropped.
fn each_line(
    max_frame: u32,
    stop: &tickwire_rt::StopFlag,
    mut each: impl FnMut(&[u8], bool) -> anyhow::Result<()>,
) -> anyhow::Result<LinesRead> {
    // Our own buffer, to see when nothing more has been read ahead.
    let mut input = std::io::BufReader::with_capacity(64 * 1024, std::io::stdin().lock());
    let mut line = Vec::new();
    let mut lines = 0u64;
    loop {
        if stop.is_set() {
            return Ok(LinesRead {
                lines,
                stopped: true,
            });
        }
        if input.buffer().is_empty() && !stdin_readable(Duration::from_millis(100)) {
            continue;
        }
        let got = input.fill_buf().context("reading standard input")?;
        if got.is_empty() {
            // The end: a last line without its line end is a line too.
            if !line.is_empty() {
                let text = line.strip_suffix(b"\r").unwrap_or(&line);
                each(text, true)?;
                lines += 1;
            }
            return Ok(LinesRead {
                lines,
                stopped: false,
            });
        }
        let (take, ended) = match got.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (got.len(), false),
        };
        line.extend_from_slice(&got[..take]);
        input.consume(take);
        let content = line.len() - usize::from(ended);
        if content > max_frame as usize {
            bail!(
                "line {} of standard input is longer than the router's largest frame \
                 ({max_frame} bytes): not published (nor anything after it)",
                lines + 1
            );
        }
        if !ended {
            continue;
        }
        let text = &line[..content];
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        each(text, input.buffer().is_empty())?;
        lines += 1;
        line.clear();
    }
}

/// Whether standard input has something to read (or its end, or an error, which the
/// read then reports) within `wait`. A failed `poll(2)` other than an interruption
/// says yes: the read then blocks as it would without this check.
fn stdin_readable(wait: Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
    let timeout = rustix::time::Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: i64::from(wait.subsec_nanos()),
    };
    match poll(&mut fds, Some(&timeout)) {
        Ok(n) => n > 0,
        Err(e) => e != rustix::io::Errno::INTR,
    }
}

/// What the connection losses cost a direct publisher, when there were any (with
/// --no-reconnect the one loss ended it, and its error says so).
fn report_outages(client: &ReconnectingClient, no_reconnect: bool) {
    let st = client.stats();
    if st.disconnects == 0 || no_reconnect {
        return;
    }
    // Kept during an outage that never ended: not sent.
    let unsent = client.offline_buffered().1 as u64;
    let lost = match unsent {
        0 => String::new(),
        n => format!(" ({n} of them never sent: no reconnection)"),
    };
    eprintln!(
        "{}, {}, {:.3} s disconnected; {} kept meanwhile to be sent after reconnecting{lost} \
         (messages in flight when a connection dropped may be lost)",
        count(st.disconnects, "disconnection", "disconnections"),
        count(st.reconnects, "reconnection", "reconnections"),
        client.time_disconnected().as_secs_f64(),
        count(st.offline_published, "message", "messages"),
    );
}

/// How a reconnecting command's error begins when `--give-up-after` ended it.
const GAVE_UP: &str = "gave up";

/// The error a reconnecting command (`sub`, `reply`) ends with when its poll failed:
/// with `--give-up-after` (`limit`) and the router out of reach, it says the command
/// gave up; anything else (a refused login after a restart, say) is reported as itself.
pub(crate) fn poll_failed(
    e: tickwire_client::Error,
    limit: Option<Duration>,
    connected: bool,
) -> anyhow::Error {
    let unreachable = matches!(
        e,
        tickwire_client::Error::Connect { .. }
            | tickwire_client::Error::Io(_)
            | tickwire_client::Error::Timeout { .. }
    );
    match limit {
        Some(limit) if unreachable && !connected => anyhow::Error::new(e).context(format!(
            "{GAVE_UP}: the router could not be reached again for {limit:?} (--give-up-after)"
        )),
        _ => e.into(),
    }
}

/// Reconnection options of the direct `pub` and `sub`: `no_reconnect` gives up on the
/// first failed attempt.
pub(crate) fn link_options(
    router: &str,
    name: &str,
    login: &crate::login::LoginArgs,
    no_reconnect: bool,
    give_up_after: Option<Duration>,
) -> anyhow::Result<ReconnectOptions> {
    Ok(ReconnectOptions {
        client: login.apply(router, ClientOptions::named(name))?,
        give_up_after: if no_reconnect {
            Some(Duration::ZERO)
        } else {
            give_up_after
        },
        ..ReconnectOptions::default()
    })
}

/// Sends what is buffered (waiting for a reconnection if the router is away, up to
/// --give-up-after).
/// A direct `pub` looks for the router's refusals (a non-fatal `PERMISSION_DENIED`:
/// the user may not publish to the topic) once per this many messages, and whenever
/// it catches up with standard input: a refused publisher stops within a fraction of
/// a second, not at the end of its schedule with a summary of messages "published".
const REFUSAL_CHECK_EVERY: u64 = 256;
/// The same for an unpaced load (`--rate 0`): a look flushes the batch.
const UNPACED_CHECK_EVERY: u64 = 8192;

/// Fails with the router's refusal of an earlier publish, if one has arrived (a poll
/// that does not wait; connection changes go to `drops` as usual). Over shared memory
/// the poll also looks for the router's end of stream: a publisher reads nothing, and
/// its writes into a dead router's ring succeed until the ring is full (83% of a
/// 30 s, 1,000 msg/s run lost without a word, in a hostile-input probe).
fn check_refused(
    client: &mut ReconnectingClient,
    drops: &mut Drops,
) -> Result<(), tickwire_client::Error> {
    if let Some(c) = client.client() {
        c.look_for_router_end();
    }
    client
        .poll(Wait::NoWait, |ev| drops.notice(&ev))
        .map(|_| ())
}

/// After the last publish is written: one round trip to the router (a PING), so that a
/// refusal of any publish before it has arrived, then [`check_refused`]. The summary
/// then tells messages the router took from messages it refused.
fn confirm_publishing(client: &mut ReconnectingClient, drops: &mut Drops) -> anyhow::Result<()> {
    if let Some(c) = client.client() {
        // A refusal, a lost connection or no answer fails the run (the summary says
        // "ended early"); only a router that closed in order is a note.
        match c.ping() {
            Ok(_) => {}
            // A router that closed in order (a restart, a shutdown) after everything was
            // written: a refusal that came before its CLOSE still counts; otherwise a
            // note, and the summary and status stand.
            Err(e @ tickwire_client::Error::Closed { code, .. })
                if code == ErrorCode::NORMAL || code == ErrorCode::SHUTTING_DOWN =>
            {
                // Asked of the connection itself: no reconnection at the very end.
                if let Some(c) = client.client() {
                    if let Err(r @ tickwire_client::Error::Rejected { .. }) =
                        c.poll(Wait::NoWait, |_| {})
                    {
                        return Err(r.into());
                    }
                }
                eprintln!("note: the router did not confirm the last publishes ({e})");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
    }
    check_refused(client, drops)?;
    Ok(())
}

fn finish_publishing(client: &mut ReconnectingClient, drops: &mut Drops) -> anyhow::Result<()> {
    client.flush()?;
    client.take_notices(|ev| drops.notice(&ev));
    while !client.is_connected() || client.offline_buffered().1 > 0 {
        client.poll(Wait::Timeout(Duration::from_millis(100)), |ev| {
            drops.notice(&ev);
        })?;
    }
    client.flush()?;
    client.take_notices(|ev| drops.notice(&ev));
    Ok(())
}

/// Tells the person at the terminal that the router went away or came back.
pub(crate) fn report_link(ev: &LinkEvent<'_>) {
    match ev {
        LinkEvent::Disconnected { reason } => {
            eprintln!("disconnected: {reason}; reconnecting");
        }
        LinkEvent::Reconnected(o) => {
            // Only what happened: a subscriber never publishes, a publisher may hold no
            // subscription (new-user pass: "0 buffered publishes sent" after every
            // reconnection of `sub`).
            let mut done = Vec::new();
            if o.resubscribed > 0 {
                let subs = count(o.resubscribed as u64, "subscription", "subscriptions");
                done.push(format!("{subs} restored"));
            }
            if o.republished > 0 {
                let publishes = count(
                    o.republished as u64,
                    "buffered publish",
                    "buffered publishes",
                );
                done.push(format!("{publishes} sent"));
            }
            let done = if done.is_empty() {
                String::new()
            } else {
                format!(": {}", done.join(", "))
            };
            eprintln!(
                "reconnected after {:.3} s ({}){done}",
                o.down_for.as_secs_f64(),
                count(u64::from(o.attempts), "attempt", "attempts"),
            );
        }
        _ => {}
    }
}

/// The payload `a` asks for; a `--size` that cannot fit in a frame of `max_frame` bytes
/// is refused before it is allocated.
fn payload_of(a: &PubArgs, max_frame: u32) -> anyhow::Result<Vec<u8>> {
    Ok(match (&a.message, a.size, a.count) {
        (Some(m), _, _) => std::os::unix::ffi::OsStrExt::as_bytes(m.as_os_str()).to_vec(),
        (None, Some(size), _) => {
            check_load_size(size, &a.topic, a.guaranteed, max_frame)?;
            load_payload(size)
        }
        (None, None, Some(_)) => load_payload(100),
        (None, None, None) => return Err(nothing_to_publish()),
    })
}

/// Bytes a PUBLISH adds to its payload besides the topic: the header and, for a
/// guaranteed one, its sequence number (docs/protocol.md). `pub` sends no stamps.
fn publish_overhead(guaranteed: bool) -> usize {
    tickwire_wire::frame::HEADER_LEN + if guaranteed { 8 } else { 0 }
}

/// Refuses (a usage error) a `--size` whose PUBLISH to `topic` would exceed
/// `max_frame`: such a payload can never be sent, and building it first could take
/// gigabytes or abort the process.
fn check_load_size(
    size: usize,
    topic: &str,
    guaranteed: bool,
    max_frame: u32,
) -> anyhow::Result<()> {
    let limit = (max_frame as usize).saturating_sub(publish_overhead(guaranteed) + topic.len());
    if size > limit {
        let whose = match max_frame {
            u32::MAX => "the protocol's largest frame",
            _ => "the router's max frame",
        };
        return Err(crate::units::UsageError(format!(
            "--size {size} is too large: a message to {topic} carries at most {limit} bytes \
             ({whose} is {max_frame} bytes, header and topic included)"
        ))
        .into());
    }
    Ok(())
}

fn nothing_to_publish() -> anyhow::Error {
    crate::units::UsageError(
        "nothing to publish: give a MESSAGE, --stdin, or --count N (see --help)".into(),
    )
    .into()
}

/// The default publisher identity: stable per topic, at most 64 bytes (a long topic
/// keeps its start and a hash of the whole).
fn default_identity(topic: &str) -> String {
    let id = format!("tickwire-pub:{topic}");
    if id.len() <= 64 {
        return id;
    }
    // FNV-1a: stable across runs and builds, unlike std's hasher.
    let hash = topic.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut cut = 64 - 17;
    while !id.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}~{hash:016x}", &id[..cut])
}

fn run_pub_guaranteed(a: PubArgs) -> anyhow::Result<ExitCode> {
    let identity = a
        .identity
        .clone()
        .unwrap_or_else(|| default_identity(&a.topic));
    let opts = ReconnectOptions {
        client: a
            .login
            .apply(&a.router, ClientOptions::named(a.name.clone()))?,
        give_up_after: Some(a.give_up_after),
        // The first connection must succeed (as for a direct `pub`): no router, no wait.
        retry_first: false,
        // Without it a message no queue matches is acknowledged and stored nowhere, and
        // the summary would count it "acknowledged" like a stored one.
        open_options: match a.allow_no_queue {
            true => 0,
            false => tickwire_client::open_options::NACK_NO_MATCH,
        },
        ..ReconnectOptions::default()
    };
    let mut p = GuaranteedPublisher::connect(&a.router, &identity, opts)
        .with_context(|| format!("opening guaranteed publisher {identity:?}"))?;
    let stop = tickwire_rt::StopFlag::install_saying(
        "stopping: waiting for the answers to what was published, then the summary \
         (Ctrl-C again to abort)",
    );
    // Each loss is said when it happens, as `sub` says it (`report_link`); its end by
    // `report_return`. Once stopping, a lost connection is not reconnected.
    p.set_on_lost(|e| {
        eprintln!("disconnected: {e}; reconnecting");
        true
    });
    p.set_stop(stop.clone());
    let seen = std::cell::Cell::new(0u64);
    // The sequence number of this run's first message: a refusal's seq then says which
    // message (or input line) it was, whatever the identity published before.
    let first_seq = std::cell::Cell::new(None::<u64>);
    let note_first = |published: &Result<u64, tickwire_client::Error>| {
        if let (Ok(seq), None) = (published, first_seq.get()) {
            first_seq.set(Some(*seq));
        }
    };
    let start = tickwire_rt::MonoNanos::now();
    // Whether Ctrl-C stopped the publishing before its end.
    let sent: anyhow::Result<bool> = (|| {
        if a.stdin {
            let max_frame = p.client().router_max_frame();
            let read = each_line(max_frame, &stop, |text, caught_up| {
                let published = p.publish(&a.topic, text);
                note_first(&published);
                let published = published.map(drop);
                report_return(&p, &seen);
                published?;
                if caught_up {
                    p.poll(Wait::NoWait)?;
                    report_return(&p, &seen);
                }
                Ok(())
            })?;
            return Ok(read.stopped);
        }
        let payload = payload_of(&a, p.client().router_max_frame())?;
        let count = a.count.unwrap_or(1);
        let sent = pace(
            count,
            a.rate,
            start,
            &stop,
            &mut p,
            |p| {
                let polled = p.poll(Wait::NoWait).map(drop);
                report_return(p, &seen);
                polled
            },
            |p, _| {
                let published = p.publish(&a.topic, &payload);
                note_first(&published);
                let published = published.map(drop);
                report_return(p, &seen);
                published
            },
        )?;
        Ok(sent < count)
    })();
    // A reconnection that Ctrl-C ended is no error: the summary counts what it left
    // unanswered.
    let sent = match sent {
        Err(_) if stop.is_set() => Ok(true),
        other => other,
    };
    let mut wait_failed = None;
    let answered = match &sent {
        Ok(_) => {
            let deadline = Instant::now().checked_add(a.answer_timeout);
            loop {
                let left = deadline.map_or(Duration::from_secs(1), |d| {
                    d.saturating_duration_since(Instant::now())
                });
                // In steps, to say a reconnection when it happens.
                let step = p.wait_answered(left.min(Duration::from_millis(100)));
                report_return(&p, &seen);
                match step {
                    Ok(true) => break Some(true),
                    Ok(false) if left.is_zero() => break Some(false),
                    Ok(false) => {}
                    Err(_) if stop.is_set() => break Some(false),
                    Err(e) => {
                        wait_failed = Some(e);
                        break None;
                    }
                }
            }
        }
        Err(_) => None,
    };
    let elapsed = tickwire_rt::MonoNanos::now().duration_since(start);
    let c = p.counts().clone();
    let mut summary = format!(
        "guaranteed publisher {identity:?} to {}: {} published, {} acknowledged, {} refused",
        a.topic, c.published, c.acked, c.nacked
    );
    if !c.nacked_by_reason.is_empty() {
        let reasons: Vec<String> = c
            .nacked_by_reason
            .iter()
            .map(|(r, n)| format!("{r}: {n}"))
            .collect();
        summary += &format!(" ({})", reasons.join(", "));
    }
    summary += &format!(
        ", {} unanswered; {} resent after {}; {:.3} s",
        p.unanswered(),
        c.resent,
        count(p.reconnects(), "reconnection", "reconnections"),
        elapsed.as_secs_f64()
    );
    eprintln!("{summary}");
    let listed = p.recent_nacks().count() as u64;
    if listed < c.nacked {
        eprintln!("  the last {listed} of the {} refused:", c.nacked);
    }
    let which = match a.stdin {
        true => "input line",
        false => "message",
    };
    for n in p.recent_nacks() {
        // Refusals of an earlier run of this identity (resent after a reconnection)
        // have no place in this run.
        let place = match first_seq.get() {
            Some(first) if n.seq >= first => format!(", {which} {} of this run", n.seq - first + 1),
            _ => String::new(),
        };
        eprintln!("  refused seq {}{place}: {} ({})", n.seq, n.reason, n.text);
    }
    let no_queue = c
        .nacked_by_reason
        .iter()
        .any(|(r, _)| *r == tickwire_client::NackReason::NO_MATCHING_QUEUE);
    if no_queue {
        eprintln!("{}", no_queue_hint(&a.topic));
    }
    // A full queue: what frees it (new-user pass: the refusal said no more).
    let mut full: Vec<&str> = Vec::new();
    for n in p.recent_nacks() {
        if n.reason == tickwire_client::NackReason::QUEUE_FULL {
            if let Some(name) = full_queue_name(&n.text).filter(|q| !full.contains(q)) {
                full.push(name);
            }
        }
    }
    for name in full {
        eprintln!("{}", queue_full_hint(name));
    }
    let unanswered = p.unanswered();
    if answered == Some(true) {
        p.close().ok();
    }
    // The publisher reconnects on its own: a network error that reaches here means
    // --give-up-after ran out, and the error says so (as `sub`'s does).
    let gave_up = |e: tickwire_client::Error| poll_failed(e, Some(a.give_up_after), false);
    let stopped = sent.map_err(|e| match e.downcast::<tickwire_client::Error>() {
        // New-user pass: two commands publishing to one topic share the default
        // identity; the first died with "taken-over" and no hint what to do.
        Ok(e @ tickwire_client::Error::Closed { code, .. }) if code == ErrorCode::TAKEN_OVER => {
            // New-user pass: the hint blamed the default identity when --identity
            // was given.
            let why = match a.identity {
                None => {
                    "another connection opened this publisher identity (two commands \
                     publishing at once share the default one): give each concurrent \
                     publisher its own --identity"
                }
                Some(_) => {
                    "another connection opened this publisher identity (--identity): give \
                     each concurrent publisher its own"
                }
            };
            anyhow::Error::new(e).context(why)
        }
        Ok(e) => gave_up(e),
        Err(e) => e,
    })?;
    if let Some(e) = wait_failed {
        return Err(gave_up(e)).context("waiting for the router's answers");
    }
    if unanswered > 0 {
        // New-user pass: what to do next was not said.
        eprintln!(
            "error: {unanswered} {} unanswered after {:?}: the router may or may not \
             have stored them (a re-run numbers its messages after this identity's last \
             stored one, so what it publishes again is stored again): look at the \
             queues first (tickwire queue show NAME{}), or wait longer (--answer-timeout)",
            if unanswered == 1 {
                "message"
            } else {
                "messages"
            },
            a.answer_timeout,
            crate::login::connection_flags()
        );
        return Ok(ExitCode::from(EXIT_UNANSWERED));
    }
    if c.nacked > 0 {
        return Ok(ExitCode::from(EXIT_NACKED));
    }
    if stopped {
        match a.stdin {
            true => eprintln!(
                "stopped ({}): published {} to {} (standard input not read to its end)",
                tickwire_rt::stop::stopped_by(),
                count(c.published, "message", "messages"),
                a.topic
            ),
            false => eprintln!(
                "stopped ({}): published {} of {} messages to {}",
                tickwire_rt::stop::stopped_by(),
                c.published,
                a.count.unwrap_or(1),
                a.topic
            ),
        }
        return Ok(ExitCode::from(EXIT_STOPPED));
    }
    Ok(ExitCode::SUCCESS)
}

/// Says that a guaranteed publisher's connection came back, once per reconnection
/// (`seen` counts those said); the loss was said when it happened (`set_on_lost`).
fn report_return(p: &GuaranteedPublisher, seen: &std::cell::Cell<u64>) {
    if p.reconnects() <= seen.get() {
        return;
    }
    seen.set(p.reconnects());
    eprintln!(
        "reconnected after {:.3} s ({}): publisher re-opened, {} resent",
        p.last_outage().unwrap_or_default().as_secs_f64(),
        count(u64::from(p.outages().last_attempts), "attempt", "attempts"),
        count(
            p.last_resent() as u64,
            "unanswered message",
            "unanswered messages"
        ),
    );
}

/// What to do when the router refused messages because no queue subscribes to `topic`.
/// The queue a QUEUE_FULL refusal names when the queue itself is full ("queue NAME is
/// full: ..."), not when the router's own limits refused it or the message alone is
/// larger than the queue may hold (waiting or purging cannot help those).
fn full_queue_name(text: &str) -> Option<&str> {
    let name = text.strip_prefix("queue ")?.split_once(" is full: ")?.0;
    tickwire_router::gm::queue::valid_name(name).then_some(name)
}

/// What frees the full queue `name`, with this command's router and login.
fn queue_full_hint(name: &str) -> String {
    let flags = crate::login::connection_flags();
    // A shell takes an unquoted word starting with '#' for a comment.
    let q = match name.starts_with('#') {
        true => format!("'{name}'"),
        false => name.to_owned(),
    };
    format!(
        "hint: queue {name} takes messages again as its consumers acknowledge them \
         (`tickwire sub --queue {q}{flags}`); `tickwire queue purge {q}{flags}` drops what it \
         holds; `tickwire queue show {q}{flags}` shows its limits"
    )
}

fn no_queue_hint(topic: &str) -> String {
    // The topic's first level names the queue, and its subtree is the pattern.
    let (name, pattern) = match topic.split_once('/') {
        Some((first, _)) => (first, format!("{first}/>")),
        None => (topic, topic.to_owned()),
    };
    let valid_name = name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.#".contains(c));
    let name = match (valid_name, name.starts_with('#')) {
        // A shell takes an unquoted word starting with '#' for a comment.
        (true, true) => format!("'{name}'"),
        (true, false) => name.to_owned(),
        (false, _) => "NAME".to_owned(),
    };
    let flags = crate::login::connection_flags();
    // A user under rules may not be allowed to create queues, and listing them is an
    // admin's (new-user pass: both suggested commands were refused to such a user).
    let then = if crate::login::logged_in() {
        "; if this user may not, ask an administrator (who sees the queues and their \
         patterns with `tickwire queue list`)"
            .to_owned()
    } else {
        format!(" (`tickwire queue list{flags}` shows the queues and their patterns)")
    };
    format!(
        "no queue subscribes to {topic}, so the router stored those messages nowhere; \
         create one first, e.g. `tickwire queue create {name} --sub '{pattern}'{flags}`{then}"
    )
}

pub(crate) fn load_payload(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Calls `send(i)` for i in 0..count on an open-loop schedule of `rate` msg/s
/// (0 = no pacing). Late sends are not skipped: they go out as soon as possible.
/// `ahead` runs before each pause for the schedule (to write what is batched); both
/// get `publisher`. Stops early once `stop` is set; returns how many were sent.
pub fn pace<P>(
    count: u64,
    rate: u64,
    start: tickwire_rt::MonoNanos,
    stop: &tickwire_rt::StopFlag,
    publisher: &mut P,
    ahead: impl Fn(&mut P) -> Result<(), tickwire_client::Error>,
    mut send: impl FnMut(&mut P, u64) -> Result<(), tickwire_client::Error>,
) -> anyhow::Result<u64> {
    for i in 0..count {
        if stop.is_set() {
            return Ok(i);
        }
        // rate 0: no pacing.
        if let Some(offset) = i.saturating_mul(1_000_000_000).checked_div(rate) {
            let due = start.add_nanos(offset);
            if tickwire_rt::MonoNanos::now() < due {
                // Ahead of the schedule: what is batched goes out before the pause,
                // so each message leaves at its time, not when 64 KiB are batched.
                ahead(publisher)?;
                tickwire_rt::pacing::wait_until(due);
            }
        }
        send(publisher, i)?;
    }
    Ok(count)
}

const SUB_HELP: &str = "\
Patterns: levels separated by '/'. '*' matches one level ('md/*/AAPL') or a
level prefix ('md/NAS*/AAPL'); '>' as the last level matches one or more levels
('md/>'). A message matching several of the patterns is printed once.

Output: one line per message, 'TOPIC PAYLOAD'. The feed handler's market-data updates
on md/ topics are decoded ('quote AAPL seq 42 bid 300 @ 189.2500 (2 orders) ask ...';
prices with ITCH's 4 decimals). Other payloads that are not printable UTF-8 are shown
as hex; a control character in a topic is shown escaped (\\u{9b}); --hex forces hex; --print-json prints one JSON object per line
({\"topic\", \"payload\" or \"payload_hex\", \"discarded\"}). When the router had to
drop messages because this subscriber read too slowly, a line says how many.

Reconnecting: the first connection must succeed (no router there: exit 1 at once; a
supervisor starting subscribers before the router restarts them); after that, when the
router restarts or the connection drops, the command says so
on standard error ('disconnected: ...; reconnecting'), reconnects with exponential
backoff (50 ms doubling to 1 s, with jitter), subscribes again and carries on
('reconnected after ...'). Messages published while it was away are not delivered
(direct messaging keeps nothing; use --queue for that); at the end, --quiet reports
the disconnections and, for publishers that number their messages (SEQ), how many
are missing. --no-reconnect exits on the first loss instead (the summary, the cause,
status 1); --give-up-after bounds the outage it waits through (default: forever; then
the summary and exit 1).

Stopping: Ctrl-C (or SIGTERM) ends the command (status 0): the messages received are
written out, and standard error gets the summary that --quiet prints at the end
('received N messages ... in S s: R msg/s over the T s from the first message to the
last', the rate only when 2 messages or more arrived over 10 ms or more; with the
disconnections if any). Once stopping it does not reconnect. A second Ctrl-C aborts at
once.

Exit status: 0 --count messages printed, stopped by Ctrl-C, or standard output closed
(`| head`); 1 the connection lost with --no-reconnect, the router not reached again
within --give-up-after (both after the summary, with the cause), or another error;
2 a usage error.

Initial image (--initial-image): on a router with a last-value cache (`tickwire router
--cache PATTERN`), the command first prints the cached messages of the matching topics,
marked '[cached]' (in JSON: \"cached_unix_ns\", when the router received it), then the
live stream: nothing missed and nothing twice between the two (a cached message that
several patterns match is printed once; two cached messages of one topic with the same
payload that the router received in the same read are one; the patterns are subscribed
one after the other, so a message published meanwhile that a later pattern also matches
comes live and then in that pattern's image). After a reconnection it
asks the new connection for a new image (which may repeat, marked, last values printed
before the loss when the router itself did not restart). When the router keeps no cache,
or none of its cache patterns covers the pattern, standard error says so (no image will
come); a pattern its cache covers with nothing cached yet gets an empty image, silently
(`tickwire cache show PATTERN` says '0 cached messages match').
  tickwire sub 'md/>' --initial-image                # every symbol's last quote, then live

Shared subscriptions (--group NAME): every `tickwire sub --group NAME` on the same
pattern is a member of one group, and the router gives each message to one member,
round robin in the order they joined; subscribers outside the group still get every
message. Members join and leave at any time. A member that stops reading is handled by
the router's slow-consumer policy like any subscriber (its share is discarded, or it
is disconnected); the others are unaffected. (It subscribes to '$share/NAME/PATTERN'.)
  tickwire sub 'jobs/>' --group workers              # run several: each job once

Examples:
  tickwire sub 'md/NASDAQ/>' 'md/*/IBM'              # print matching messages
  tickwire sub 'md/>' --give-up-after 30s            # exit if the router stays away 30 s
  tickwire sub 'md/>' --no-reconnect                 # exit when the connection drops
  tickwire sub 'orders/>' --count 10 --print-json    # 10 messages as JSON lines
  tickwire sub 'md/>' --quiet --count 1000000        # count and rate only
  tickwire sub 'md/>' --router 10.0.0.5:7420        # another router
  tickwire sub --patterns-file symbols.txt           # one pattern a line, all pipelined

Queues (--queue NAME): instead of subscribing, bind to a durable queue (see
`tickwire queue`) and consume: each message is printed as
'[id ID] TOPIC PAYLOAD' (with 'delivery N, redelivered' when it was delivered
before, and 'recovered: may have been delivered before' for a message the router
recovered from its spool after a restart, which cannot know) and acknowledged once it is written out, so the router removes it; into a
pipe, once the reader has taken it out of the pipe, or has had it there for half the
queue's ack timeout (a slow reader: acknowledged then, before the queue hands it on
again), or for 2 s at the end (--count, Ctrl-C): what a reader that exits or dies
leaves in the pipe is not acknowledged and comes again (standard error says how many
when the pipe closes, and the exit status stays 0). What the reader took and did not
process is acknowledged all the same: `| head -5` reads ahead up to the window, so
take exactly N messages with --count N, not with head. Up to --window messages are in
flight unacknowledged. An acknowledgement that comes after the queue's ack timeout
(the message was already handed on: to another consumer, again to this one, or to
the dead-letter queue) is refused by the router: a warning says so, and the summary
counts them. With --start other than 'queue' the
binding replays (browses) the queue's retained messages from that point instead
(a time may carry an offset, 2026-11-24T10:30:00+01:00; Unix time is in nanoseconds;
a start after the router's newest message or clock is refused).
When the router restarts or the connection drops it says so ('disconnected: ...;
reconnecting'), reconnects and binds again ('reconnected after S s (A attempts): bound
to queue Q again'), as the direct subscription does (and its summary counts the
reconnections and the time disconnected): --give-up-after bounds the wait (default: forever; then exit 1),
--no-reconnect exits (the summary, the cause, status 1) instead, Ctrl-C ends the wait
(after the connection attempt under way, if any). Messages printed but not yet
acknowledged then come again, marked redelivered.
  tickwire sub --queue orders                        # consume and acknowledge
  tickwire sub --queue orders --count 10 --print-json
  tickwire sub --queue audit --start time:2026-11-24T09:30:00Z --quiet";

/// The two forms (clap's own usage line shows only the patterns).
const SUB_USAGE: &str = "\
tickwire sub [OPTIONS] <PATTERN>...        subscribe to patterns (direct messages)
       tickwire sub [OPTIONS] --patterns-file <FILE> [PATTERN]...   the same, from a file
       tickwire sub [OPTIONS] --queue <NAME>      consume a durable queue (guaranteed)";

#[derive(Args)]
#[command(after_help = SUB_HELP, override_usage = SUB_USAGE)]
pub struct SubArgs {
    /// Router address: HOST:PORT, tls://HOST:PORT (with --ca), or shm:NAME for shared
    /// memory on this host.
    #[arg(long, default_value = DEFAULT_ROUTER, value_name = "ADDR", value_parser = crate::units::parse_router_addr)]
    router: String,
    #[command(flatten)]
    login: crate::login::LoginArgs,
    /// One or more patterns, e.g. 'md/NASDAQ/>' 'md/*/IBM'.
    #[arg(required_unless_present_any = ["queue", "patterns_file"], value_name = "PATTERN", value_parser = crate::units::parse_pattern)]
    patterns: Vec<String>,
    /// Also subscribe to the patterns in FILE, one a line ('-': standard input); blank
    /// lines and lines starting with '#' are skipped. For thousands of symbols: the
    /// patterns go pipelined, at about one round trip in all (with --initial-image, one
    /// round trip each: each image is its own request).
    #[arg(long, value_name = "FILE", conflicts_with = "queue")]
    patterns_file: Option<std::path::PathBuf>,
    /// Consume from this durable queue instead of subscribing (see below). Quote a name
    /// that starts with '#' ('#DEAD_MSG_QUEUE'): unquoted, the shell reads it as a
    /// comment and --queue gets no value.
    #[arg(long, value_name = "NAME", conflicts_with = "patterns")]
    queue: Option<String>,
    // The queue-only flags are checked by `queue_only_flags`, not clap's `requires`:
    // clap lets a requirement go when the required flag conflicts with a present one
    // (--queue with the patterns), so `sub 'a/>' --start beginning` was accepted and
    // did nothing.
    /// With --queue: most messages delivered and not yet acknowledged [default: 64, or
    /// --count when smaller: at the exit, up to a window of messages delivered and not
    /// printed go back to the queue, flagged redelivered when they come again].
    #[arg(long, value_name = "N", value_parser = crate::units::parse_count_u32)]
    window: Option<u32>,
    /// With --queue: queue (consume; `now` is the same) | beginning | id:N |
    /// time:RFC3339-or-ns (replay) [default: queue].
    #[arg(long, value_name = "START", value_parser = crate::queue_cmd::parse_start)]
    start: Option<Start>,
    /// Exit after this many messages (at least 1).
    #[arg(long, value_name = "N", value_parser = crate::units::parse_count)]
    count: Option<u64>,
    /// Print payloads as hex.
    #[arg(long)]
    hex: bool,
    /// Print one JSON object per message.
    #[arg(long, alias = "json", conflicts_with = "hex")]
    print_json: bool,
    /// Print nothing per message; report the count (and rate) at the end.
    #[arg(long, conflicts_with_all = ["hex", "print_json"])]
    quiet: bool,
    /// Client name shown in the router's stats.
    #[arg(long, default_value = "tickwire-sub", value_parser = crate::units::parse_client_name)]
    name: String,
    /// Ask the router for an initial image: the cached last value of every matching
    /// topic first (lines marked '[cached]'), then the live stream (see below).
    #[arg(long, conflicts_with_all = ["queue", "group"])]
    initial_image: bool,
    /// Join the shared subscription (queue group) NAME on every pattern: each message
    /// goes to one member of the group (see below).
    #[arg(long, value_name = "NAME", conflicts_with = "queue", value_parser = parse_group)]
    group: Option<String>,
    /// Exit when the connection is lost instead of reconnecting.
    #[arg(long)]
    no_reconnect: bool,
    /// Exit when the router cannot be reached again for this long [default: never].
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_give_up, conflicts_with = "no_reconnect")]
    give_up_after: Option<Duration>,
    #[command(flatten)]
    multicast: crate::sub_mcast::MulticastArgs,
}

/// Whether `out` is a pipe whose reading end has been closed: `poll(2)` reports an error
/// on such a pipe without writing to it. False for terminals and files.
fn reader_gone(out: &impl std::os::fd::AsFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(out, PollFlags::empty())];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

pub fn run_sub(mut a: SubArgs) -> anyhow::Result<ExitCode> {
    if let Some(queue) = a.queue.clone() {
        return run_sub_queue(a, &queue);
    }
    queue_only_flags(&a)?;
    if let Some(path) = &a.patterns_file {
        if path.as_os_str() == "-" && a.login.password_from_stdin() {
            return Err(crate::units::UsageError(
                "--patterns-file - and --password-file - both read standard input: give \
                 one of them a file"
                    .into(),
            )
            .into());
        }
        let more = read_patterns_file(path, a.patterns.is_empty())?;
        a.patterns.extend(more);
    }
    // A usage error before connecting (new-user pass: it came after).
    let patterns: Vec<String> = a
        .patterns
        .iter()
        .map(|p| match &a.group {
            Some(g) => grouped(g, p),
            None => Ok(p.clone()),
        })
        .collect::<Result<_, _>>()?;
    let opts = link_options(
        &a.router,
        &a.name,
        &a.login,
        a.no_reconnect,
        a.give_up_after,
    )?;
    let mut client = ReconnectingClient::connect(&a.router, a.multicast.apply(opts))?;
    let mut mcast = crate::sub_mcast::SubMulticast::new(&a.multicast, &a.patterns);
    if a.initial_image {
        // Asked before subscribing (no message can arrive during the request). The
        // stats document gives the cache patterns to admin users only: otherwise, or
        // on any failure, nothing is said.
        let stats = client.client().and_then(|c| c.stats_json().ok());
        let cached = stats.as_deref().and_then(crate::cache_cmd::cache_patterns);
        // A few notes, then a count (a patterns file may hold thousands).
        const NOTES: usize = 3;
        let notes: Vec<String> = a
            .patterns
            .iter()
            .filter_map(|p| crate::cache_cmd::no_image_note(p, cached.as_deref()))
            .collect();
        for note in notes.iter().take(NOTES) {
            eprintln!("{note}");
        }
        if notes.len() > NOTES {
            eprintln!(
                "--initial-image: and {} more patterns get no initial image",
                notes.len() - NOTES
            );
        }
    }
    if a.initial_image {
        for p in &patterns {
            client
                .subscribe_with_image(p)
                .with_context(|| format!("subscribing to {p:?}"))?;
        }
    } else {
        // Pipelined: many patterns cost about one round trip, not one each.
        client
            .subscribe_many(&patterns)
            .with_context(|| match patterns.as_slice() {
                // The router's refusal names the pattern.
                [_] => "subscribing".to_owned(),
                all => format!("subscribing to {} patterns", all.len()),
            })?;
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 << 10, stdout.lock());
    let mut tally = Tally::new(a.count);
    let mut discarded = 0u64;
    let mut lost: Option<String> = None;
    // Overlapping patterns each get an image (one per SUBSCRIBE): a cached message
    // already printed on this connection (the same topic, payload and time the router
    // received it: messages read together share that time) is not printed again
    // (new-user pass: 'md/X/A' 'md/*/A' printed every cached message twice, where the
    // help promises nothing twice). Forgotten at a disconnection: the next
    // connection's images may repeat, as documented.
    let dedupe_images = a.initial_image && patterns.len() > 1;
    let mut image_seen: std::collections::HashSet<(Box<str>, u64, u64)> =
        std::collections::HashSet::new();
    let mut image_repeats = 0u64;
    mcast.refresh(&mut client)?;
    // Ctrl-C (or SIGTERM) ends the loop at its next poll: what is buffered is written
    // and the summary printed (a second Ctrl-C aborts). Once stopping, it polls no more
    // (so never reconnects) and reports no connection change.
    let stop = tickwire_rt::StopFlag::install_saying(STOP_NOTE);
    while tally.wants_more() && !stop.is_set() {
        // With multicast streams, TCP is polled without waiting and the wait is theirs.
        // Without a connection too: a poll then reconnects when an attempt is due, and
        // the pause between attempts is slept here, in steps that notice Ctrl-C, not
        // inside a poll that could reconnect after it.
        let connected = client.is_connected();
        let wait = match mcast.active() || !connected {
            true => Wait::NoWait,
            false => Wait::Timeout(Duration::from_millis(200)),
        };
        let polled = client.poll(wait, |ev| {
            let LinkEvent::Message(m) = ev else {
                // Flushed first, so the report lands between the right messages.
                out.flush().ok();
                if matches!(ev, LinkEvent::Disconnected { .. }) {
                    image_seen.clear();
                }
                match ev {
                    LinkEvent::Disconnected { reason } if a.no_reconnect => {
                        lost = Some(reason.to_owned());
                    }
                    // Stopping: the router going away now is no news to report, and
                    // nothing is "reconnecting".
                    _ if stop.is_set() => {}
                    _ => report_link(&ev),
                }
                return;
            };
            if let (true, Some(at)) = (dedupe_images, m.cached()) {
                let payload = {
                    use std::hash::{Hash, Hasher};
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    m.payload().hash(&mut h);
                    h.finish()
                };
                if !image_seen.insert((m.topic().into(), at, payload)) {
                    image_repeats += 1;
                    return;
                }
            }
            discarded = discarded.saturating_add(emit(&m, &a, &mut out, &mut tally));
        });
        tally.note_turn();
        let mut idle = matches!(polled, Ok(0));
        if let Err(e) = polled {
            out.flush().ok();
            let e = poll_failed(e, a.give_up_after, client.is_connected());
            // Whatever ended it (the wait given up, a restarted router refusing the
            // subscriptions back, a protocol error): the summary of what was received,
            // then the cause (new-user pass: a refused restore printed no summary).
            tally.report(&sub_note(discarded, image_repeats));
            mcast.report();
            return Err(e);
        }
        if idle && !connected && !mcast.active() && !client.is_connected() {
            std::thread::sleep(Duration::from_millis(20));
        }
        if mcast.active() || a.multicast.on() {
            mcast.refresh(&mut client)?;
            let wait = Duration::from_millis(if idle { 1 } else { 0 });
            let got = mcast.poll(wait, |m| match m {
                Some(m) => discarded = discarded.saturating_add(emit(m, &a, &mut out, &mut tally)),
                None => drop(out.flush()),
            });
            tally.note_turn();
            idle &= got == 0;
        }
        if let Some(reason) = lost.take() {
            // An end a supervisor must tell from a normal one: the summary, then the
            // cause and exit status 1 (as when --give-up-after ends the wait).
            out.flush().ok();
            tally.report(&sub_note(discarded, image_repeats));
            mcast.report();
            mcast.close();
            anyhow::bail!("{reason} (--no-reconnect)");
        }
        // A closed pipe (`tickwire sub ... | head`) ends the command quietly; the
        // buffered writer reports it on a write or on this flush, whichever comes first,
        // and a quiet subscription notices it through `reader_gone`.
        let closed = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let gone = idle && reader_gone(&std::io::stdout());
        if let Some(e) = tally
            .io_err
            .take()
            .or_else(|| out.flush().err())
            .or_else(|| gone.then(closed))
        {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(ExitCode::SUCCESS);
            }
            return Err(e).context("writing to standard output");
        }
    }
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(e).context("writing to standard output");
        }
        _ => {}
    }
    if a.quiet || stop.is_set() {
        tally.report(&sub_note(discarded, image_repeats));
        mcast.report();
        let st = client.stats();
        if st.disconnects > 0 {
            // Only numbered messages (SEQ) show what an outage cost; `tickwire pub`
            // numbers nothing, and 0 missing would then mean nothing.
            let missing = match st.numbered {
                0 => "missing messages not counted (the messages carry no sequence \
                      numbers)"
                    .to_owned(),
                // Gaps seen only: messages lost after a topic's last number received
                // show none (new-user pass: 27,200 counted, 27,478 not received, read
                // as exact).
                _ => format!(
                    "at least {} missing by sequence number (the gaps between numbers \
                     received; messages after a topic's last one received are not seen)",
                    count(st.missed_by_seq, "message", "messages")
                ),
            };
            eprintln!(
                "{}, {}, {:.3} s disconnected; {missing}",
                count(st.disconnects, "disconnection", "disconnections"),
                count(st.reconnects, "reconnection", "reconnections"),
                client.time_disconnected().as_secs_f64(),
            );
        }
    }
    mcast.close();
    client.close().ok();
    Ok(ExitCode::SUCCESS)
}

/// The summary's note: what the router discarded, and the cached messages of an image
/// not shown again because an earlier pattern's image had them.
fn sub_note(discarded: u64, image_repeats: u64) -> String {
    match image_repeats {
        0 => format!("({discarded} discarded by the router)"),
        n => format!(
            "({discarded} discarded by the router; {n} cached {} matched more than one \
             pattern and {} shown once)",
            if n == 1 { "message" } else { "messages" },
            if n == 1 { "was" } else { "were" },
        ),
    }
}

/// Counts and prints one message (unless --count is reached or --quiet); returns its
/// DISCARDS count.
fn emit(
    m: &tickwire_client::Message<'_>,
    a: &SubArgs,
    out: &mut impl Write,
    tally: &mut Tally,
) -> u64 {
    if !tally.take() {
        return 0;
    }
    if !a.quiet {
        if let Err(e) = print_message(out, m, a.hex, a.print_json) {
            tally.io_err = Some(e);
        }
    }
    m.discarded()
}

fn run_sub_queue(a: SubArgs, queue: &str) -> anyhow::Result<ExitCode> {
    // A consumer that stops after --count messages needs no larger window: what is
    // delivered and not printed when it exits (up to a window, since each
    // acknowledgement lets the router send one more) goes back to the queue and comes
    // to the next consumer flagged redelivered, though nobody saw it.
    let window = a
        .window
        .unwrap_or_else(|| a.count.map_or(64, |n| n.clamp(1, 64) as u32));
    let start = a.start.unwrap_or(Start::Queue);
    // The direct subscription's options (--give-up-after, --no-reconnect); the first
    // connection must succeed.
    let opts = ReconnectOptions {
        retry_first: false,
        ..link_options(
            &a.router,
            &a.name,
            &a.login,
            a.no_reconnect,
            a.give_up_after,
        )?
    };
    let mut consumer = QueueConsumer::connect(&a.router, queue, window, start, opts)
        .with_context(|| format!("binding to queue {queue:?}"))?;
    // Said as the direct subscription says it (`report_link`), when the loss happens.
    consumer.set_on_lost(match a.no_reconnect {
        false => |e| {
            eprintln!("disconnected: {e}; reconnecting");
            true
        },
        true => |_| {
            QUEUE_LOST.store(true, std::sync::atomic::Ordering::Relaxed);
            false
        },
    });
    // A standby says when it takes over (new-user pass: it started printing messages
    // without a word).
    let mut standby = !consumer.binding().active;
    if standby {
        eprintln!("queue {queue:?} is exclusive and has a consumer: waiting as a standby");
    }
    let stdout = std::io::stdout();
    // Into a pipe (`| head`, `| grep`), a line written is not yet a line read: the
    // reader may exit with it still in the pipe. There a message is acknowledged only
    // once its last byte has left the pipe (the pipe's unread bytes, `FIONREAD`).
    let pipe = !a.quiet && is_pipe(&stdout);
    let ack_after = match pipe {
        true => pipe_ack_after(&mut consumer, queue),
        false => Duration::ZERO,
    };
    let mut acks = PipeAcks::new(pipe, ack_after);
    let mut out = CountingWriter::new(std::io::BufWriter::with_capacity(64 << 10, stdout.lock()));
    let mut tally = Tally::new(a.count);
    let mut redelivered = 0u64;
    // Message ids handled in this turn (each with the end of its output), acknowledged
    // once the output is flushed (and, into a pipe, read).
    let mut handled: Vec<(u64, u64, Instant)> = Vec::with_capacity(window as usize);
    // Bytes of output that reached standard output (counted at each successful flush).
    let mut in_pipe = 0u64;
    // Ctrl-C: what was printed is acknowledged, then the summary (as without --queue).
    let stop = tickwire_rt::StopFlag::install_saying(STOP_NOTE);
    consumer.set_stop(stop.clone());
    let mut late_acks = 0u64;
    while tally.wants_more() && !stop.is_set() {
        let reconnects = consumer.reconnects();
        // Output waiting in the pipe: look again soon, for its acknowledgements.
        let wait = acks.next_look().unwrap_or(Duration::from_millis(200));
        // Deliveries of this poll are aged from now (their ack timeout runs from their
        // delivery, not from when the pipe takes them).
        let received_at = Instant::now();
        let polled = consumer.poll(Wait::Timeout(wait), |d| {
            if !tally.take() {
                return;
            }
            redelivered += u64::from(d.redelivered);
            if !a.quiet {
                if let Err(e) = print_delivery(&mut out, &d, a.hex, a.print_json) {
                    tally.io_err = Some(e);
                    return;
                }
            }
            handled.push((d.msg_id, out.written, received_at));
        });
        if consumer.reconnects() != reconnects && !consumer.binding().active {
            // Bound again after a reconnection, and another consumer is active now.
            standby = true;
            eprintln!("queue {queue:?} is exclusive and has a consumer: waiting as a standby");
        } else if standby && consumer.binding().active {
            standby = false;
            eprintln!("queue {queue:?}: the active consumer went; this one is active now");
        }
        tally.note_turn();
        if let Err(e) = polled {
            out.flush().ok();
            // A stop request ended the reconnection; --no-reconnect said why it ends.
            if stop.is_set() {
                tally.report(&queue_what(queue, redelivered, consumer.late_acks()));
                consumer.close().ok();
                return Ok(ExitCode::SUCCESS);
            }
            if QUEUE_LOST.load(std::sync::atomic::Ordering::Relaxed) {
                // As the direct subscription: the summary, then the cause (exit 1).
                tally.report(&queue_what(queue, redelivered, consumer.late_acks()));
                return Err(e).context(format!(
                    "consuming queue {queue:?}: connection to the router lost (--no-reconnect)"
                ));
            }
            let e = poll_failed(e, a.give_up_after, false);
            if e.to_string().starts_with(GAVE_UP) {
                tally.report(&queue_what(queue, redelivered, consumer.late_acks()));
            }
            return Err(e).with_context(|| format!("consuming queue {queue:?}"));
        }
        warn_late_acks(&consumer, &mut late_acks);
        if consumer.reconnects() > reconnects {
            eprintln!(
                "reconnected after {:.3} s ({}): bound to queue {queue} again (what was \
                 printed and not yet acknowledged comes again, marked redelivered)",
                consumer.outages().last.unwrap_or_default().as_secs_f64(),
                count(
                    u64::from(consumer.outages().last_attempts),
                    "attempt",
                    "attempts"
                ),
            );
        }
        if let Some(e) = tally.io_err.take().or_else(|| out.flush().err()) {
            // Nothing written for these: leave them unacknowledged for redelivery.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                // What the reader took before it went is acknowledged (the pipe's unread
                // bytes can still be asked), the rest comes again.
                // By the bytes that reached the pipe (what is still in our buffer never
                // did), and nothing by age: the reader is gone.
                let _ = ack_runs(&mut consumer, acks.take_taken(in_pipe, &stdout));
                acks.report_closed(handled.len());
                let _ = consumer.client().flush();
                return Ok(ExitCode::SUCCESS);
            }
            return Err(e).context("writing to standard output");
        }
        in_pipe = out.written;
        acks.written(&mut handled);
        ack_runs(&mut consumer, acks.take_read(in_pipe, &stdout))?;
        if acks.waiting() > 0 && reader_gone(&stdout) {
            let _ = ack_runs(&mut consumer, acks.take_taken(in_pipe, &stdout));
            acks.report_closed(0);
            let _ = consumer.client().flush();
            return Ok(ExitCode::SUCCESS);
        }
    }
    // What the pipe still holds: acknowledged as its reader takes it, for up to
    // PIPE_END_WAIT, then as written if the reader is still there; what a reader that
    // went left comes again.
    let end_by = Instant::now() + PIPE_END_WAIT;
    loop {
        // Before asking whether the reader is gone: it may have read everything and
        // exited (`--count 5 | head -5`).
        ack_runs(&mut consumer, acks.take_read(in_pipe, &stdout))?;
        let Some(nap) = acks.next_look() else {
            break;
        };
        if reader_gone(&stdout) {
            break;
        }
        if Instant::now() >= end_by {
            ack_runs(&mut consumer, acks.take_all())?;
            break;
        }
        std::thread::sleep(nap);
    }
    acks.report_unread(0);
    consumer.client().flush()?;
    // One round trip, so that the router's answer to the last acknowledgements is in:
    // one refused as too late is then said and counted. Deliveries that come meanwhile
    // are not taken (they return to the queue when the binding ends).
    if consumer.client().ping().is_ok() {
        let _ = consumer.poll(Wait::NoWait, |_| {});
        warn_late_acks(&consumer, &mut late_acks);
    }
    if a.quiet || stop.is_set() {
        tally.report(&queue_what(queue, redelivered, consumer.late_acks()));
        // As the direct subscription's summary says it (new-user pass: only `sub` did).
        if consumer.reconnects() > 0 {
            eprintln!(
                "{}, {:.3} s disconnected; what was not acknowledged before a loss came \
                 again, marked redelivered",
                count(consumer.reconnects(), "reconnection", "reconnections"),
                consumer.outages().total.as_secs_f64(),
            );
        }
    }
    consumer.close().ok();
    Ok(ExitCode::SUCCESS)
}

/// Says, the first time, that the router refused an acknowledgement as too late
/// ([`QueueConsumer::late_acks`]); `seen` is the count said so far.
fn warn_late_acks(consumer: &QueueConsumer, seen: &mut u64) {
    if consumer.late_acks() > *seen {
        if *seen == 0 {
            eprintln!(
                "warning: the router no longer held a message this consumer acknowledged \
                 (its ack timeout, the queue's ack_timeout_ms, had passed, or the \
                 connection it came on was lost): it is delivered again, here, to another \
                 consumer or to the dead-letter queue, and so processed twice; the summary \
                 counts the acknowledgements refused (each covers one or more deliveries)"
            );
        }
        *seen = consumer.late_acks();
    }
}

/// What `sub --queue`'s summary adds to "received N messages".
fn queue_what(queue: &str, redelivered: u64, late_acks: u64) -> String {
    // Flagged, not known twice: a router restart flags every message it recovered
    // (new-user pass: a queue nobody had consumed from read "49985 redelivered").
    let redelivered = match redelivered {
        0 => "0 redelivered".to_owned(),
        n => format!(
            "{n} flagged redelivered: delivered before, or recovered after a router restart"
        ),
    };
    match late_acks {
        0 => format!("from queue {queue} ({redelivered})"),
        // One refusal per acknowledgement the router held nothing of: an acknowledgement
        // covers a range of deliveries, so this counts ranges, not messages (new-user
        // pass: 3 messages delivered twice each were "2 acknowledgements").
        n => format!(
            "from queue {queue} ({redelivered}; {} came too late, after the ack \
             timeout: one or more deliveries each, processed again here, by another \
             consumer or in the dead-letter queue)",
            count(n, "acknowledgement", "acknowledgements")
        ),
    }
}

/// How long a message written into a pipe waits there unacknowledged when the queue's
/// ack timeout is not known (`queue show` refused): then it is acknowledged as written
/// (a slow reader has it). Held past the ack timeout, the queue would hand it on again
/// and the reader would see it twice, or the dead-letter queue would take it.
const PIPE_ACK_AFTER_UNKNOWN: Duration = Duration::from_secs(1);

/// At its end (`--count`, Ctrl-C), how long `sub --queue` waits for a live reader to
/// take what is in the pipe before acknowledging it as written.
const PIPE_END_WAIT: Duration = Duration::from_secs(2);

/// Half the queue's `ack_timeout_ms` (asked once with `queue show`), or
/// [`PIPE_ACK_AFTER_UNKNOWN`].
fn pipe_ack_after(consumer: &mut QueueConsumer, queue: &str) -> Duration {
    consumer
        .client()
        .queue_request(tickwire_wire::gm::QueueOp::Show, queue)
        .ok()
        .and_then(|json| serde_json::from_str::<serde_json::Value>(&json).ok())
        .and_then(|v| v["definition"]["ack_timeout_ms"].as_u64())
        .map_or(PIPE_ACK_AFTER_UNKNOWN, |ms| match ms {
            // No ack timeout: nothing is handed on for lateness, so nothing is
            // acknowledged by age (only when read, or at the end).
            0 => Duration::MAX,
            ms => Duration::from_millis(ms) / 2,
        })
}

/// Whether `out` is a pipe (or FIFO).
fn is_pipe(out: &impl std::os::fd::AsFd) -> bool {
    rustix::fs::fstat(out).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo
    })
}

/// A writer that counts the bytes it accepts: with a buffered writer below it, after a
/// successful flush every byte counted has been handed to the file.
struct CountingWriter<W> {
    inner: W,
    written: u64,
}

impl<W: Write> CountingWriter<W> {
    fn new(inner: W) -> CountingWriter<W> {
        CountingWriter { inner, written: 0 }
    }
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// `sub --queue`'s acknowledgements of what it wrote: at once into a file or terminal;
/// into a pipe, once the reader has read the message's last byte (bytes written less
/// the pipe's unread bytes). A reader that exits (`| head -5`) leaves what it did not
/// read unacknowledged, so the queue delivers it again instead of losing it.
struct PipeAcks {
    pipe: bool,
    /// The longest a message waits in the pipe unacknowledged ([`pipe_ack_after`]).
    ack_after: Duration,
    /// Written into the pipe, not yet read: (message id, end of its output, when it
    /// was written).
    unread: std::collections::VecDeque<(u64, u64, Instant)>,
    ids: Vec<u64>,
}

impl PipeAcks {
    fn new(pipe: bool, ack_after: Duration) -> PipeAcks {
        PipeAcks {
            pipe,
            ack_after,
            unread: std::collections::VecDeque::new(),
            ids: Vec::new(),
        }
    }

    /// Messages written (flushed) this turn, drained from `handled` (id, end of its
    /// output, when it was delivered).
    fn written(&mut self, handled: &mut Vec<(u64, u64, Instant)>) {
        self.unread.extend(handled.drain(..));
    }

    /// Messages written and not yet acknowledged.
    fn waiting(&self) -> usize {
        self.unread.len()
    }

    /// When to look at the pipe again (`None`: nothing waits in it): soon while the
    /// oldest message is fresh (a reader that keeps up takes it within a moment), then
    /// every 10 ms, never later than its `ack_after`.
    fn next_look(&self) -> Option<Duration> {
        let &(_, _, at) = self.unread.front()?;
        let age = at.elapsed();
        let step = match age < Duration::from_millis(20) {
            true => Duration::from_millis(1),
            false => Duration::from_millis(10),
        };
        Some(
            step.min(self.ack_after.saturating_sub(age))
                .max(Duration::from_micros(100)),
        )
    }

    /// The ids to acknowledge now: all written, or, into a pipe, those its reader has
    /// read past (`written` bytes handed to it in all) and those that waited in it
    /// `ack_after`. A pipe whose unread bytes cannot be asked counts as read (as a
    /// file).
    fn take_read(&mut self, written: u64, out: &impl std::os::fd::AsFd) -> &[u64] {
        self.take(written, out, true)
    }

    /// [`PipeAcks::take_read`] for a reader that is gone: only what it took out of the
    /// pipe, nothing by age.
    fn take_taken(&mut self, written: u64, out: &impl std::os::fd::AsFd) -> &[u64] {
        self.take(written, out, false)
    }

    fn take(&mut self, written: u64, out: &impl std::os::fd::AsFd, by_age: bool) -> &[u64] {
        self.ids.clear();
        let read = match self.pipe {
            false => u64::MAX,
            true => written.saturating_sub(rustix::io::ioctl_fionread(out).unwrap_or(0)),
        };
        while let Some(&(id, end, at)) = self.unread.front() {
            if end > read && !(by_age && at.elapsed() >= self.ack_after) {
                break;
            }
            self.ids.push(id);
            self.unread.pop_front();
        }
        &self.ids
    }

    /// Every id written and not yet acknowledged, to acknowledge now.
    fn take_all(&mut self) -> &[u64] {
        self.ids.clear();
        self.ids.extend(self.unread.drain(..).map(|(id, _, _)| id));
        &self.ids
    }

    /// Standard output closed by its reader (`| head -5`): what is left unacknowledged,
    /// and what was not (what the reader took out of the pipe, read ahead included).
    /// Standard error may be that pipe too (`2>&1 |`): written without a panic.
    fn report_closed(&self, unwritten: usize) {
        let n = (self.unread.len() + unwritten) as u64;
        let _ = writeln!(
            std::io::stderr(),
            "standard output closed by its reader: {} written and not read left \
             unacknowledged (the queue delivers them again); what it had taken out of the \
             pipe was acknowledged, read ahead and unprocessed included (head reads \
             ahead): --count N takes exactly N messages",
            count(n, "message", "messages")
        );
    }

    /// Says what is left unacknowledged (written and unread, plus `unwritten`
    /// handled but not written) when the command ends.
    fn report_unread(&self, unwritten: usize) {
        let n = (self.unread.len() + unwritten) as u64;
        if n > 0 {
            let _ = writeln!(
                std::io::stderr(),
                "{} written to standard output and not read from it (its reader ended) \
                 left unacknowledged: the queue delivers them again",
                count(n, "message", "messages")
            );
        }
    }
}

/// Most bytes `--patterns-file` reads: 100 MiB is a million patterns of 100 bytes,
/// more than any router limit lets one client hold.
const PATTERNS_FILE_MAX: u64 = 100 << 20;

/// The patterns of `--patterns-file` (see its help). A line that is not a pattern, a
/// file without any when it is the `only` source of patterns, one that cannot be read or one over [`PATTERNS_FILE_MAX`] is a
/// usage error naming the file (and the line).
fn read_patterns_file(path: &std::path::Path, only: bool) -> anyhow::Result<Vec<String>> {
    use std::io::Read;
    let name = path.display();
    let mut text = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin()
            .lock()
            .take(PATTERNS_FILE_MAX + 1)
            .read_to_end(&mut text)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(PATTERNS_FILE_MAX + 1).read_to_end(&mut text))
    };
    if let Err(e) = read {
        return Err(crate::units::UsageError(format!("--patterns-file {name}: {e}")).into());
    }
    if text.len() as u64 > PATTERNS_FILE_MAX {
        return Err(crate::units::UsageError(format!(
            "--patterns-file {name}: larger than {} MiB",
            PATTERNS_FILE_MAX >> 20
        ))
        .into());
    }
    // A byte-order mark (files saved by Windows tools) is not part of the first pattern.
    let text = text.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&text);
    let mut patterns = Vec::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let bytes = line.trim_ascii();
        if bytes.is_empty() || bytes.starts_with(b"#") {
            continue;
        }
        let Ok(line) = std::str::from_utf8(line) else {
            return Err(crate::units::UsageError(format!(
                "--patterns-file {name}, line {}: not UTF-8 text",
                i + 1
            ))
            .into());
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let p = crate::units::parse_pattern(line).map_err(|e| {
            crate::units::UsageError(format!("--patterns-file {name}, line {}: {e}", i + 1))
        })?;
        patterns.push(p);
    }
    if patterns.is_empty() && only {
        return Err(
            crate::units::UsageError(format!("--patterns-file {name}: no pattern in it")).into(),
        );
    }
    Ok(patterns)
}

/// Refuses (a usage error, as `pub --identity` without --guaranteed) the flags that
/// only a queue binding reads, given to a direct subscription.
fn queue_only_flags(a: &SubArgs) -> anyhow::Result<()> {
    let given: Vec<&str> = [
        (a.window.is_some(), "--window"),
        (a.start.is_some(), "--start"),
    ]
    .into_iter()
    .filter_map(|(on, flag)| on.then_some(flag))
    .collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(crate::units::UsageError(format!(
        "{} only {} with --queue NAME (a durable queue); a subscription to patterns \
         receives the live stream",
        given.join(" and "),
        if given.len() == 1 { "applies" } else { "apply" },
    ))
    .into())
}

/// Set by `sub --queue --no-reconnect` when the connection is lost (the loss handler is
/// a plain `fn`, which cannot capture): the command then ends as the direct one does.
static QUEUE_LOST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What the first Ctrl-C on `sub` says: it then writes out what it has, prints the
/// summary and exits.
const STOP_NOTE: &str = "stopping (Ctrl-C again to abort)";

/// What `sub` counts while it prints: the messages taken (up to `--count`), when the
/// first and the last arrived, and the first error writing them out (after which none
/// is taken).
struct Tally {
    limit: u64,
    received: u64,
    /// When the subscriber began listening (the time the summary covers).
    started: Instant,
    first: Option<Instant>,
    /// The end of the last loop turn that took a message ([`Tally::note_turn`]): the
    /// clock is read once per turn, not per message.
    last: Option<Instant>,
    /// `received` when `last` was taken.
    received_at_last: u64,
    io_err: Option<std::io::Error>,
}

impl Tally {
    fn new(count: Option<u64>) -> Tally {
        Tally {
            limit: count.unwrap_or(u64::MAX),
            received: 0,
            started: Instant::now(),
            first: None,
            last: None,
            received_at_last: 0,
            io_err: None,
        }
    }

    fn wants_more(&self) -> bool {
        self.received < self.limit
    }

    /// Counts one arrival; false (not counted, not to be printed) once `--count` are
    /// taken or writing failed.
    fn take(&mut self) -> bool {
        if self.received >= self.limit || self.io_err.is_some() {
            return false;
        }
        self.received += 1;
        self.first.get_or_insert_with(Instant::now);
        true
    }

    /// Marks the end of a loop turn: when it took messages, the last of them arrived
    /// by now.
    fn note_turn(&mut self) {
        if self.received > self.received_at_last {
            self.received_at_last = self.received;
            self.last = Some(Instant::now());
        }
    }

    /// The `--quiet` summary on stderr; `what` tells what else was counted.
    fn report(&self, what: &str) {
        let total = self.started.elapsed().as_secs_f64();
        let messages = count(self.received, "message", "messages");
        let span = match (self.first, self.last) {
            (Some(first), Some(last)) => Some(last.saturating_duration_since(first)),
            _ => None,
        };
        match span {
            // The rate is the stream's, from the first message to the last: neither the
            // wait for a publisher nor the quiet after it (until Ctrl-C) counts. Over a
            // burst that arrived within a few ms (one read, or a handful of messages)
            // it would be the speed of a loop turn, not of the stream: none then.
            Some(span) if self.received > 1 && span >= MIN_RATE_SPAN => eprintln!(
                "received {messages} {what} in {total:.3} s: {} msg/s over the {:.3} s \
                 from the first message to the last",
                rate_text((self.received - 1) as f64 / span.as_secs_f64()),
                span.as_secs_f64()
            ),
            Some(span) if self.received > 1 => eprintln!(
                "received {messages} {what} in {total:.3} s (all within {:.3} ms of the \
                 first: too short a span for a rate)",
                span.as_secs_f64() * 1e3
            ),
            _ => eprintln!("received {messages} {what} in {total:.3} s"),
        }
    }
}

/// A message rate for a summary: whole numbers from 100 msg/s up, and enough digits
/// below that for a slow stream not to read "0 msg/s".
fn rate_text(rate: f64) -> String {
    match rate {
        r if r >= 100.0 => format!("{r:.0}"),
        r if r >= 1.0 => format!("{r:.1}"),
        r => format!("{r:.3}"),
    }
}

/// A byte rate in the unit that keeps three digits or so: `0.4 MB/s` read `0.0 MB/s`
/// for a paced load (200 msg/s of 100 bytes is 20 kB/s).
fn bytes_rate_text(bytes_per_s: f64) -> String {
    match bytes_per_s {
        b if b >= 1e6 => format!("{:.1} MB/s", b / 1e6),
        b if b >= 1e3 => format!("{:.1} kB/s", b / 1e3),
        b => format!("{b:.0} B/s"),
    }
}

/// The rate part of `pub`'s summary: `sent` messages of `size` bytes, the first sent at
/// the schedule's start and the last `span` later. The rate is over the intervals
/// between them (`sent - 1`; new-user pass: 2 messages at 1/s read "2.0 msg/s"), and
/// none over fewer than 2 messages or a span under [`MIN_RATE_SPAN`] (a burst: the speed
/// of a loop, "25996083 msg/s").
fn pub_rate_text(sent: u64, size: usize, span: Duration) -> String {
    if sent < 2 {
        return String::new();
    }
    if span < MIN_RATE_SPAN {
        return format!(
            " (all within {:.3} ms: too short a span for a rate)",
            span.as_secs_f64() * 1e3
        );
    }
    let per_s = (sent - 1) as f64 / span.as_secs_f64();
    format!(
        ": {} msg/s, {}",
        rate_text(per_s),
        bytes_rate_text(per_s * size as f64)
    )
}

/// The shortest first-to-last span `sub`'s summary states a rate over (`Tally::report`).
const MIN_RATE_SPAN: Duration = Duration::from_millis(10);

/// Acknowledges `ids` (in delivery order), one range per run of consecutive ids.
fn ack_runs(consumer: &mut QueueConsumer, ids: &[u64]) -> Result<(), tickwire_client::Error> {
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        // Checked: ids 2^64-1 then 0 (a router's choice) are two runs, not one.
        while j + 1 < ids.len() && ids[j].checked_add(1) == Some(ids[j + 1]) {
            j += 1;
        }
        consumer.ack_range(ids[i], ids[j])?;
        i = j + 1;
    }
    Ok(())
}

fn print_delivery(
    out: &mut impl Write,
    d: &tickwire_client::Delivery<'_>,
    hex: bool,
    json: bool,
) -> std::io::Result<()> {
    let topic = String::from_utf8_lossy(d.topic);
    let text = printable(d.payload);
    if !json {
        return print_delivery_line(out, d, &tickwire_rt::text::terminal_safe(&topic), text, hex);
    }
    let mut obj = json_object(&topic, d.payload, hex);
    obj.insert("msg_id".into(), d.msg_id.into());
    obj.insert("delivery_count".into(), d.delivery_count.into());
    obj.insert("redelivered".into(), d.redelivered.into());
    if let Some(seq) = d.seq {
        obj.insert("seq".into(), seq.into());
    }
    writeln!(out, "{}", serde_json::Value::Object(obj))
}

/// [`print_delivery`]'s text line, `topic` already fit for a terminal.
fn print_delivery_line(
    out: &mut impl Write,
    d: &tickwire_client::Delivery<'_>,
    topic: &str,
    text: Option<&str>,
    hex: bool,
) -> std::io::Result<()> {
    let body = match (text, hex) {
        (Some(t), false) => t.to_owned(),
        _ => to_hex(d.payload),
    };
    if d.delivery_count > 1 {
        writeln!(
            out,
            "[id {} delivery {}, redelivered] {topic} {body}",
            d.msg_id, d.delivery_count
        )
    } else if d.redelivered {
        // The first delivery since the router restarted, flagged because it may have
        // been delivered before the crash (new-user pass: "delivery 1, redelivered"
        // read as a contradiction).
        writeln!(
            out,
            "[id {} recovered: may have been delivered before] {topic} {body}",
            d.msg_id
        )
    } else {
        writeln!(out, "[id {}] {topic} {body}", d.msg_id)
    }
}

pub fn print_message(
    out: &mut impl Write,
    m: &tickwire_client::Message<'_>,
    hex: bool,
    json: bool,
) -> std::io::Result<()> {
    if m.discarded() > 0 && !json {
        let n = m.discarded();
        writeln!(
            out,
            "# {} {} discarded by the router (this subscriber read too slowly)",
            count(n, "message", "messages"),
            if n == 1 { "was" } else { "were" }
        )?;
    }
    if m.cached().is_some() && !json {
        write!(out, "[cached] ")?;
    }
    if json {
        let mut obj = json_object(m.topic(), m.payload(), hex);
        obj.insert("discarded".into(), m.discarded().into());
        if let Some(at) = m.cached() {
            obj.insert("cached_unix_ns".into(), at.into());
        }
        writeln!(out, "{}", serde_json::Value::Object(obj))
    } else {
        write_line(out, m.topic(), m.payload(), hex)
    }
}

/// One message as a line: `TOPIC PAYLOAD`, the payload as hex when it is not printable
/// or `hex` is on; a feed handler's market-data update on an `md/` topic is decoded
/// (`md_text`) unless `hex` is on.
pub(crate) fn write_line(
    out: &mut impl Write,
    topic: &str,
    payload: &[u8],
    hex: bool,
) -> std::io::Result<()> {
    // A topic may hold C1 control characters (the protocol refuses only ASCII ones),
    // which some terminals obey as escape sequences: never printed raw.
    let topic = tickwire_rt::text::terminal_safe(topic);
    match (printable(payload), hex) {
        (Some(t), false) => writeln!(out, "{topic} {t}"),
        (None, false) if topic.starts_with("md/") => match md_text(payload) {
            Some(t) => writeln!(out, "{topic} {t}"),
            None => writeln!(out, "{topic} {}", to_hex(payload)),
        },
        _ => writeln!(out, "{topic} {}", to_hex(payload)),
    }
}

/// A normalized market-data update (docs/market-data.md) as text, e.g.
/// `quote AAPL seq 42 bid 300 @ 189.2500 (2 orders) ask 100 @ 189.2600 (1 order)`;
/// None when the payload is not one.
fn md_text(payload: &[u8]) -> Option<String> {
    use std::fmt::Write as _;
    use tickwire_itch::{Price, Symbol};
    use tickwire_md::book::Side;
    use tickwire_md::update::{decode, Update};
    let u = decode(payload).ok()?;
    let h = u.header();
    let symbol = Symbol(h.symbol);
    // ITCH prices carry 4 implied decimals (Price's Display).
    let price = |p: u32| Price(p).to_string();
    let side = |orders: u32, shares: u64, p: u32| {
        if orders == 0 {
            "none".to_owned()
        } else {
            format!(
                "{shares} @ {} ({})",
                price(p),
                count(u64::from(orders), "order", "orders")
            )
        }
    };
    let mut s = String::new();
    match u {
        Update::Trade(_, t) => {
            // The side of the resting order, as ITCH reports it.
            let resting = match t.side {
                Side::Buy => "buy",
                Side::Sell => "sell",
            };
            let _ = write!(
                s,
                "trade {symbol} seq {} {} @ {} resting {resting} match {}",
                h.seq,
                t.shares,
                price(t.price),
                t.match_number
            );
        }
        Update::Quote(_, q) => {
            let _ = write!(
                s,
                "quote {symbol} seq {} bid {} ask {}",
                h.seq,
                side(q.bid_orders, q.bid_shares, q.bid_price),
                side(q.ask_orders, q.ask_shares, q.ask_price)
            );
        }
        Update::Depth(_, d) => {
            let _ = write!(s, "depth {symbol} seq {}", h.seq);
            for (name, sd) in [("bids", Side::Buy), ("asks", Side::Sell)] {
                let levels: Vec<String> = d
                    .levels(sd)
                    .map(|l| format!("{} @ {}", l.shares, price(l.price)))
                    .collect();
                let shown = if levels.is_empty() {
                    "none".to_owned()
                } else {
                    levels.join(", ")
                };
                let _ = write!(s, " {name} {shown}");
            }
        }
    }
    Some(s)
}

/// The payload as text, if it is UTF-8 without control characters (tabs allowed).
fn printable(payload: &[u8]) -> Option<&str> {
    std::str::from_utf8(payload)
        .ok()
        .filter(|t| !t.chars().any(|c| c.is_control() && c != '\t'))
}

/// The JSON output's object for one message: its topic and its payload, as `payload`
/// when it is printable and `hex` is off, else as `payload_hex`.
pub(crate) fn json_object(
    topic: &str,
    payload: &[u8],
    hex: bool,
) -> serde_json::Map<String, serde_json::Value> {
    let mut obj = serde_json::Map::new();
    obj.insert("topic".into(), topic.into());
    match (printable(payload), hex) {
        (Some(t), false) => obj.insert("payload".into(), t.into()),
        _ => obj.insert("payload_hex".into(), to_hex(payload).into()),
    };
    obj
}

fn to_hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// A `--identity` NAME: 1 to 64 bytes without control characters (the router's rule),
/// checked before connecting (new-user pass: `--identity ''` failed with status 1 after
/// connecting).
fn parse_identity(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 64 || s.chars().any(char::is_control) {
        return Err(format!(
            "{:?} is not a publisher identity: 1 to 64 bytes, no control characters",
            tickwire_rt::text::terminal_safe(s)
        ));
    }
    Ok(s.to_owned())
}

/// `pattern` shared in group `g` (`$share/g/pattern`); a pattern that names a group
/// already is a usage error (review: `$share/pool/$share/x/...` matched nothing, in
/// silence).
pub(crate) fn grouped(g: &str, pattern: &str) -> Result<String, crate::units::UsageError> {
    if pattern.starts_with("$share/") {
        return Err(crate::units::UsageError(format!(
            "--group {g} with the shared pattern {pattern:?}: give one or the other \
             (--group NAME with the plain pattern, or '$share/NAME/PATTERN' alone)"
        )));
    }
    Ok(tickwire_client::shared_pattern(g, pattern))
}

/// A `--group` NAME: one topic level ([`tickwire_client::validate_group`]); a `/` would
/// make the router read the rest as part of the pattern (new-user pass: `--group a/b`
/// joined group `a` on `b/md/>`).
pub(crate) fn parse_group(s: &str) -> Result<String, String> {
    match tickwire_client::validate_group(s) {
        Ok(()) => Ok(s.to_owned()),
        // clap already says "invalid value" (new-user pass: "invalid" twice).
        Err(tickwire_client::Error::InvalidArgument(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod md_text_tests {
    use super::*;

    /// New-user pass: `pub --identity ''` failed after connecting (status 1).
    #[test]
    fn a_publisher_identity_is_1_to_64_bytes() {
        assert_eq!(parse_identity("desk-1"), Ok("desk-1".to_owned()));
        for bad in ["", &"x".repeat(65), "a\u{7}b"] {
            let e = parse_identity(bad).unwrap_err();
            assert!(e.contains("not a publisher identity"), "{bad:?}: {e}");
        }
    }

    /// New-user pass: `sub --group a/b` subscribed group `a` to `b/md/>`.
    #[test]
    fn a_group_name_is_one_topic_level() {
        assert_eq!(parse_group("desk-1"), Ok("desk-1".to_owned()));
        for bad in ["a/b", "", "a*", ">", "a\u{1b}b"] {
            let e = parse_group(bad).unwrap_err();
            assert!(e.contains("not a group name"), "{bad:?}: {e}");
        }
    }
    use tickwire_md::book::Side;
    use tickwire_md::update::{encode_quote, encode_trade, Header, Quote, Trade};

    fn header() -> Header {
        Header {
            locate: 7,
            symbol: *b"AAPL    ",
            seq: 42,
            exchange_ns: 1,
            receive_ns: 2,
        }
    }

    fn line(topic: &str, payload: &[u8], hex: bool) -> String {
        let mut out = Vec::new();
        write_line(&mut out, topic, payload, hex).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_topic_with_a_c1_control_character_is_printed_escaped() {
        // U+009B is CSI to a terminal that obeys C1 controls; topics may hold it.
        assert_eq!(line("a/\u{9b}31m", b"x", false), "a/\\u{9b}31m x\n");
        assert_eq!(line("md/plain", b"x", false), "md/plain x\n");
    }

    #[test]
    fn market_data_updates_on_md_topics_are_decoded() {
        let mut q = Vec::new();
        let quote = Quote {
            bid_price: 1_892_500,
            bid_orders: 2,
            bid_shares: 300,
            ask_price: 0,
            ask_orders: 0,
            ask_shares: 0,
        };
        encode_quote(&mut q, &header(), &quote);
        assert_eq!(
            line("md/NASDAQ/AAPL/quote", &q, false),
            "md/NASDAQ/AAPL/quote quote AAPL seq 42 bid 300 @ 189.2500 (2 orders) ask none\n"
        );
        let mut t = Vec::new();
        let trade = Trade {
            price: 1_892_600,
            shares: 100,
            side: Side::Sell,
            source: b'E',
            flags: 0,
            match_number: 9,
        };
        encode_trade(&mut t, &header(), &trade);
        assert_eq!(
            line("md/NASDAQ/AAPL/trade", &t, false),
            "md/NASDAQ/AAPL/trade trade AAPL seq 42 100 @ 189.2600 resting sell match 9\n"
        );
        // --hex, another topic, or bytes that are no update: hex as before.
        assert!(line("md/NASDAQ/AAPL/trade", &t, true).ends_with(&format!("{}\n", to_hex(&t))));
        assert!(line("orders/x", &t, false).ends_with(&format!("{}\n", to_hex(&t))));
        let junk = [0xffu8, 0, 1];
        assert_eq!(
            line("md/x", &junk, false),
            format!("md/x {}\n", to_hex(&junk))
        );
    }
}

#[cfg(test)]
mod summary_tests {
    use super::{bytes_rate_text, rate_text};

    /// Demanding-user pass: a slow stream's summary read "0 msg/s over the 4.846 s".
    #[test]
    fn a_slow_rate_keeps_its_digits() {
        assert_eq!(rate_text(0.2063), "0.206");
        assert_eq!(rate_text(2.5), "2.5");
        assert_eq!(rate_text(19947.4), "19947");
    }

    /// New-user pass: `pub --count 2 --rate 1` said "2.0 msg/s", `--count 100 --rate
    /// 1k` "1010 msg/s"; a burst "in 0.000 s: 25996083 msg/s".
    #[test]
    fn pub_states_the_rate_over_the_intervals_it_paced() {
        use super::pub_rate_text;
        use std::time::Duration;
        let ms = Duration::from_millis;
        assert_eq!(pub_rate_text(2, 100, ms(1000)), ": 1.0 msg/s, 100 B/s");
        assert_eq!(pub_rate_text(100, 100, ms(99)), ": 1000 msg/s, 100.0 kB/s");
        assert_eq!(pub_rate_text(1, 100, ms(5000)), "");
        let burst = pub_rate_text(1000, 100, Duration::from_micros(40));
        assert!(burst.contains("too short a span for a rate"), "{burst}");
    }

    /// New-user pass: `pub --rate 200` of 100-byte messages read "0.0 MB/s".
    #[test]
    fn a_slow_byte_rate_keeps_its_digits() {
        assert_eq!(bytes_rate_text(20_000.0), "20.0 kB/s");
        assert_eq!(bytes_rate_text(3_500_000.0), "3.5 MB/s");
        assert_eq!(bytes_rate_text(12.0), "12 B/s");
    }
}

#[cfg(test)]
mod swapped_tests {
    use super::swapped_arguments;

    /// New-user pass: `pub 'bid 1' md/X` published "md/X" to the topic "bid 1" without
    /// a word.
    #[test]
    fn swapped_pub_arguments_get_a_note_and_ordinary_ones_none() {
        let note = swapped_arguments("bid 1", Some("md/X"), "").expect("a note");
        assert!(note.contains("tickwire pub md/X \"bid 1\"`?"), "{note}");
        // The suggested command goes to the same router, logged in the same way.
        let note =
            swapped_arguments("bid 1", Some("md/X"), " --router 127.0.0.1:7001").expect("a note");
        assert!(
            note.contains("`tickwire pub md/X \"bid 1\" --router 127.0.0.1:7001`?"),
            "{note}"
        );
        assert_eq!(swapped_arguments("md/X", Some("bid 1"), ""), None);
        assert_eq!(swapped_arguments("md/X", Some("a/b"), ""), None);
        assert_eq!(swapped_arguments("my topic", Some("hello"), ""), None);
        assert_eq!(swapped_arguments("bid 1", None, ""), None);
        assert_eq!(swapped_arguments("a b/c", Some("md/X"), ""), None);
    }
}

#[cfg(test)]
mod tests {
    use super::{print_delivery_line, queue_what};

    /// New-user pass: a message recovered after a restart read "delivery 1,
    /// redelivered", a contradiction on its first delivery.
    #[test]
    fn a_recovered_first_delivery_is_not_called_redelivered() {
        let line = |count, redelivered| {
            let d = tickwire_client::Delivery {
                binding: 1,
                msg_id: 7,
                delivery_count: count,
                redelivered,
                seq: None,
                stamps: None,
                topic: b"q/a",
                payload: b"x",
            };
            let mut out = Vec::new();
            print_delivery_line(&mut out, &d, "q/a", Some("x"), false).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(line(1, false), "[id 7] q/a x\n");
        assert_eq!(
            line(1, true),
            "[id 7 recovered: may have been delivered before] q/a x\n"
        );
        assert_eq!(line(2, true), "[id 7 delivery 2, redelivered] q/a x\n");
    }

    #[test]
    fn the_queue_summary_says_redelivered_messages_are_flagged_not_known_twice() {
        assert_eq!(queue_what("q", 0, 0), "from queue q (0 redelivered)");
        let s = queue_what("orders", 49_985, 0);
        assert!(
            s.contains("49985 flagged redelivered") && s.contains("router restart"),
            "{s}"
        );
        let s = queue_what("q", 2, 1);
        assert!(
            s.contains("2 flagged redelivered") && s.contains("1 acknowledgement came too late"),
            "{s}"
        );
    }
}
