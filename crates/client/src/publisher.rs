//! A guaranteed publisher that survives router restarts: reconnect, re-open, resend.

use std::time::{Duration, Instant};

use tickwire_rt::StopFlag;
use tickwire_wire::frame::ErrorCode;

use crate::backoff::Backoff;
use crate::gm::{NackRecord, PublishCounts, PublishWindow};
use crate::{Client, ClientOptions, Error, Wait};

/// How a [`GuaranteedPublisher`] connects and reconnects. Every field has a
/// [`Default`].
#[derive(Debug, Clone)]
pub struct ReconnectOptions {
    /// Options of every connection. Default [`ClientOptions::default`].
    pub client: ClientOptions,
    /// PUB_OPEN option bits ([`open_options`](crate::open_options)). Default 0.
    pub open_options: u32,
    /// Pause before the second connection attempt; it doubles after each failure up
    /// to `max_backoff`. Default 50 ms.
    pub initial_backoff: Duration,
    /// Longest pause between attempts. Default 1 s.
    pub max_backoff: Duration,
    /// Give up (return the last error) when no connection could be opened for this
    /// long; `None` retries forever. Default 60 s. Zero: a first connection gets one
    /// try (with the whole `connect_timeout`), and a
    /// [`ReconnectingClient`](crate::ReconnectingClient) whose connection is lost does
    /// not reopen it: a `publish`, `flush` or `subscribe` that finds it lost fails with
    /// its cause, a `poll` reports [`LinkEvent::Disconnected`](crate::LinkEvent) and
    /// every later call fails.
    pub give_up_after: Option<Duration>,
    /// Draw each pause uniformly from `[pause / 2, pause]` ([`Backoff`]), so that
    /// clients that lost the same router do not all come back at once. Default on.
    pub jitter: bool,
    /// [`GuaranteedPublisher::connect`] and [`QueueConsumer::connect`](crate::QueueConsumer::connect):
    /// retry a first connection that fails like a lost one (for up to `give_up_after`).
    /// `false`: return the first attempt's error at once, as a command-line tool
    /// should when no router is running (reconnections after that still retry).
    /// Default `true`.
    pub retry_first: bool,
    /// [`ReconnectingClient`](crate::ReconnectingClient) only: bytes of publishes
    /// (topic + payload) kept while disconnected, sent after the reconnection; a
    /// publish beyond it fails with [`Error::OfflineBufferFull`]. Default 1 MiB.
    pub offline_buffer_bytes: usize,
}

impl Default for ReconnectOptions {
    fn default() -> ReconnectOptions {
        ReconnectOptions {
            client: ClientOptions::default(),
            open_options: 0,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            give_up_after: Some(Duration::from_secs(60)),
            jitter: true,
            retry_first: true,
            offline_buffer_bytes: 1 << 20,
        }
    }
}

impl ReconnectOptions {
    /// For a router on this host that is restarted at once (a supervisor, a test, the
    /// demo): the client named `name`, backoff from 20 ms to 200 ms, giving up after
    /// `give_up_after` without a connection; the rest as [`Default`].
    pub fn local(name: &str, give_up_after: Duration) -> ReconnectOptions {
        ReconnectOptions {
            client: ClientOptions::named(name),
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(200),
            give_up_after: Some(give_up_after),
            ..ReconnectOptions::default()
        }
    }
}

/// One publisher identity on a router, kept open across connection losses.
///
/// On a connection failure (end of stream, reset, timeout, the router closing) it
/// connects again with bounded backoff, re-opens the identity and resends every
/// unanswered publish in sequence order; the router stores none twice. It fails only
/// when [`ReconnectOptions::give_up_after`] passes without a connection, when another
/// connection takes the identity over ([`ErrorCode::TAKEN_OVER`]), or on an error
/// that a new connection would not cure (a bad topic, a refused PUB_OPEN, a protocol
/// error).
///
/// Outcomes are reported as totals ([`GuaranteedPublisher::counts`]) and the most
/// recent refusals ([`GuaranteedPublisher::recent_nacks`]), not as events: use
/// [`Client::publish_guaranteed`] and [`Client::poll_events`] directly for one event
/// per answer.
///
/// ```no_run
/// use std::time::Duration;
/// use tickwire_client::{GuaranteedPublisher, ReconnectOptions};
///
/// fn main() -> Result<(), tickwire_client::Error> {
///     let mut p = GuaranteedPublisher::connect("127.0.0.1:7420", "orders-gw-1", ReconnectOptions::default())?;
///     for i in 0..1000 {
///         p.publish("orders/new", format!("order {i}").as_bytes())?;
///     }
///     let all = p.wait_answered(Duration::from_secs(30))?;
///     let c = p.counts();
///     println!("answered: {all}, acked {}, nacked {}, resent {}", c.acked, c.nacked, c.resent);
///     p.close()
/// }
/// ```
#[derive(Debug)]
pub struct GuaranteedPublisher {
    addr: String,
    identity: String,
    opts: ReconnectOptions,
    client: Client,
    reconnects: u64,
    /// The reconnections' durations and attempts.
    outages: Outages,
    /// Publishes the last re-open sent again.
    last_resent: usize,
    /// Told of a lost connection before reconnecting; false: do not reconnect.
    on_lost: Option<fn(&Error) -> bool>,
    /// Once set, reconnection attempts end (with the last error).
    stop: Option<StopFlag>,
}

impl GuaranteedPublisher {
    /// Connects to `addr`, opens `identity` (1 to 64 bytes; keep it stable across
    /// restarts of the program so that a resend is recognised) and resends nothing
    /// yet. A first connection that fails is retried like a lost one, unless
    /// [`ReconnectOptions::retry_first`] is off.
    pub fn connect(
        addr: &str,
        identity: &str,
        opts: ReconnectOptions,
    ) -> Result<GuaranteedPublisher, Error> {
        let (client, _, _) =
            open(addr, identity, &opts.for_first(), Box::default(), None).map_err(|(e, _)| e)?;
        Ok(GuaranteedPublisher {
            addr: addr.to_owned(),
            identity: identity.to_owned(),
            opts,
            client,
            reconnects: 0,
            outages: Outages::default(),
            last_resent: 0,
            on_lost: None,
            stop: None,
        })
    }

    /// Calls `on_lost` with the cause when the connection is lost, before reconnecting
    /// (a command says so there: the reconnection may take a while); when it returns
    /// false, no reconnection is tried and the call returns the cause. As
    /// [`crate::QueueConsumer::set_on_lost`].
    pub fn set_on_lost(&mut self, on_lost: fn(&Error) -> bool) {
        self.on_lost = Some(on_lost);
    }

    /// Ends the reconnection attempts (the call returns the last error) promptly once
    /// `stop` is set: a Ctrl-C need not wait for `give_up_after`.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.stop = Some(stop);
    }

    /// How long the connection was lost the last time it came back (None before any
    /// reconnection).
    pub fn last_outage(&self) -> Option<Duration> {
        self.outages.last
    }

    /// How long the reconnections took, and with how many attempts.
    pub fn outages(&self) -> Outages {
        self.outages
    }

    /// Publishes `payload` to `topic` as a guaranteed message; returns its sequence
    /// number. Waits while the window is full; reconnects and resends as needed.
    pub fn publish(&mut self, topic: &str, payload: &[u8]) -> Result<u64, Error> {
        loop {
            match self.client.publish_guaranteed(topic, payload) {
                Ok(seq) => {
                    self.client.drop_stashed_events();
                    return Ok(seq);
                }
                Err(e) => self.recover(e)?,
            }
        }
    }

    /// Writes pending publishes and reads the answers that arrived, waiting per
    /// `wait`; returns how many events were read. Reconnects as needed.
    pub fn poll(&mut self, wait: Wait) -> Result<usize, Error> {
        loop {
            match self.client.poll_events(wait, |_| {}) {
                Ok(n) => return Ok(n),
                Err(e) => self.recover(e)?,
            }
        }
    }

    /// Flushes and waits until every publish is answered, or `timeout` passes:
    /// `Ok(true)` when nothing is unanswered. Reconnects as needed.
    pub fn wait_answered(&mut self, timeout: Duration) -> Result<bool, Error> {
        let deadline = Instant::now().checked_add(timeout);
        while self.client.unanswered() > 0 {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(1),
            };
            if left.is_zero() {
                return Ok(false);
            }
            self.poll(Wait::Timeout(left.min(Duration::from_millis(100))))?;
        }
        Ok(true)
    }

    /// Outcome totals, each publish counted once across reconnects.
    pub fn counts(&self) -> &PublishCounts {
        self.client.publish_counts()
    }

    /// The last few refusals, oldest first.
    pub fn recent_nacks(&self) -> impl Iterator<Item = &NackRecord> + '_ {
        self.client.recent_nacks()
    }

    /// Publishes not answered yet.
    pub fn unanswered(&self) -> usize {
        self.client.unanswered()
    }

    /// Connections opened after the first.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// Publishes the last reconnection sent again, unanswered then (0 before any).
    /// [`PublishCounts::resent`] counts every resend, those of attempts that failed
    /// before the open succeeded included.
    pub fn last_resent(&self) -> usize {
        self.last_resent
    }

    /// The identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The current connection (for its id, window or a ping). Publishing through it
    /// directly is allowed: it shares the window.
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Closes the connection (see [`Client::close`]); unanswered publishes are
    /// abandoned: call [`GuaranteedPublisher::wait_answered`] first.
    pub fn close(self) -> Result<(), Error> {
        self.client.close()
    }

    /// After `cause` ended the connection: reconnect and re-open, or return the error
    /// when a new connection would not help.
    fn recover(&mut self, cause: Error) -> Result<(), Error> {
        if !worth_reconnecting(&cause) {
            return Err(cause);
        }
        if let Some(on_lost) = self.on_lost {
            if !on_lost(&cause) {
                return Err(cause);
            }
        }
        let lost_at = Instant::now();
        let window = std::mem::take(&mut self.client.gm);
        self.client.abandon_tx();
        match open(
            &self.addr,
            &self.identity,
            &self.opts,
            window,
            self.stop.as_ref(),
        ) {
            Ok((c, resent, attempts)) => {
                self.client = c;
                self.reconnects += 1;
                self.outages.record(lost_at.elapsed(), attempts);
                self.last_resent = resent;
                Ok(())
            }
            Err((e, window)) => {
                // Keep the unanswered publishes and counts reachable.
                self.client.gm = window;
                Err(e)
            }
        }
    }
}

/// Connects and opens `identity` with `window`'s unanswered publishes, retrying with
/// backoff until `give_up_after` or `stop`; returns the client, the publishes the
/// successful open resent and the attempts it took. On failure the window is handed
/// back with the error.
fn open(
    addr: &str,
    identity: &str,
    opts: &ReconnectOptions,
    mut window: Box<PublishWindow>,
    stop: Option<&StopFlag>,
) -> Result<(Client, usize, u32), (Error, Box<PublishWindow>)> {
    let retryable = |e: &Error| worth_reconnecting(e) || router_busy(e);
    let opened = with_retries(opts, stop, retryable, |client| {
        window.handle_disconnect();
        let mut c = Client::connect_to(addr, client)?;
        c.gm = std::mem::take(&mut window);
        match c.open_publisher(identity, opts.open_options) {
            Ok(opened) => Ok((c, opened.resent)),
            Err(e) => {
                window = std::mem::take(&mut c.gm);
                c.abandon_tx();
                Err(e)
            }
        }
    });
    opened
        .map(|((c, resent), attempts)| (c, resent, attempts))
        .map_err(|e| {
            window.handle_disconnect();
            (e, window)
        })
}

/// How long the reconnections of a [`GuaranteedPublisher`] or a
/// [`crate::QueueConsumer`] took, and with how many attempts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outages {
    /// How long the last lost connection took to come back (None before any
    /// reconnection).
    pub last: Option<Duration>,
    /// Connection attempts the last reconnection took, the one that succeeded included
    /// (0 before any).
    pub last_attempts: u32,
    /// All the time spent reconnecting since the start (a lost connection that has not
    /// come back is not counted).
    pub total: Duration,
}

impl Outages {
    /// A lost connection came back after `outage`, at the `attempts`th attempt.
    pub(crate) fn record(&mut self, outage: Duration, attempts: u32) {
        self.last = Some(outage);
        self.last_attempts = attempts;
        self.total += outage;
    }
}

/// Runs `attempt` (a connection and its first exchange, with the client options it is
/// given) until it succeeds (returning its result and the attempts made, that one
/// included), pausing between tries per `opts`' backoff while
/// `retryable` says the error may pass; the last error once it may not, once
/// `give_up_after` has passed, or once `stop` is set (seen within 20 ms, pauses
/// included). Each attempt's connect timeout (the handshake included) is capped at what
/// is left of `give_up_after` (at least 100 ms): a router that accepts connections and never
/// answers (stopped, say) held `--give-up-after 2s` for 12.9 s (new-user pass). Shared
/// by [`GuaranteedPublisher`] and [`crate::QueueConsumer`].
pub(crate) fn with_retries<T>(
    opts: &ReconnectOptions,
    stop: Option<&StopFlag>,
    retryable: impl Fn(&Error) -> bool,
    mut attempt: impl FnMut(ClientOptions) -> Result<T, Error>,
) -> Result<(T, u32), Error> {
    let stopped = || stop.is_some_and(StopFlag::is_set);
    let started = Instant::now();
    let mut backoff = opts.backoff();
    let mut attempts = 0u32;
    loop {
        attempts = attempts.saturating_add(1);
        let mut client = opts.client.clone();
        // Zero is one try (`for_first`), with the whole connect timeout (review: it
        // had 100 ms for connect, TLS and handshake together).
        if let Some(limit) = opts.give_up_after.filter(|l| !l.is_zero()) {
            let left = limit
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(100));
            client.connect_timeout = client.connect_timeout.min(left);
        }
        let err = match attempt(client) {
            Ok(v) => return Ok((v, attempts)),
            Err(e) => e,
        };
        let expired = opts
            .give_up_after
            .is_some_and(|limit| started.elapsed() >= limit);
        if !retryable(&err) || expired || stopped() {
            return Err(err);
        }
        // In steps, so that a stop request is seen within one.
        let resume = Instant::now() + backoff.next_pause();
        while let Some(left) = resume.checked_duration_since(Instant::now()) {
            if stopped() {
                return Err(err);
            }
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
    }
}

/// A PUB_OPEN refused BUSY: the identity cannot be opened just now (the router is
/// still writing that it forgot it, or every identity it remembers is in use);
/// trying again later may succeed.
fn router_busy(e: &Error) -> bool {
    matches!(
        e,
        Error::Rejected {
            code: ErrorCode::BUSY,
            ..
        }
    )
}

impl ReconnectOptions {
    /// The options of a first connection: these, or, with `retry_first` off, one try.
    pub(crate) fn for_first(&self) -> ReconnectOptions {
        if self.retry_first {
            self.clone()
        } else {
            ReconnectOptions {
                give_up_after: Some(Duration::ZERO),
                ..self.clone()
            }
        }
    }

    /// The backoff schedule these options describe, seeded per process and call.
    pub(crate) fn backoff(&self) -> Backoff {
        let seed = tickwire_rt::MonoNanos::now().as_nanos() ^ u64::from(std::process::id()) << 32;
        Backoff::new(self.initial_backoff, self.max_backoff, self.jitter, seed)
    }
}

/// Whether a new connection could cure `e`.
pub(crate) fn worth_reconnecting(e: &Error) -> bool {
    match e {
        Error::Connect { .. } | Error::Io(_) | Error::Timeout { .. } => true,
        Error::Closed { code, .. } => {
            *code != ErrorCode::TAKEN_OVER && *code != ErrorCode::MALFORMED_FRAME
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review: one try (`give_up_after` zero, a first connection without retries) had
    /// its connect timeout cut to 100 ms; it keeps the whole timeout.
    #[test]
    fn one_try_keeps_the_whole_connect_timeout() {
        let mut opts = ReconnectOptions::local("t", Duration::ZERO);
        opts.client.connect_timeout = Duration::from_secs(7);
        let got = with_retries(&opts, None, |_| true, |c| Ok(c.connect_timeout));
        assert_eq!(got.ok(), Some((Duration::from_secs(7), 1)));
        // A limit still bounds each attempt by what is left of it.
        opts.give_up_after = Some(Duration::from_secs(2));
        let got = with_retries(&opts, None, |_| true, |c| Ok(c.connect_timeout));
        assert!(got.ok().is_some_and(|(t, _)| t <= Duration::from_secs(2)));
    }

    #[test]
    fn which_errors_reconnect() {
        let closed = |code| Error::Closed {
            code,
            reason: String::new(),
        };
        assert!(worth_reconnecting(&closed(ErrorCode::NORMAL)));
        assert!(worth_reconnecting(&closed(ErrorCode::SHUTTING_DOWN)));
        assert!(!worth_reconnecting(&closed(ErrorCode::TAKEN_OVER)));
        assert!(worth_reconnecting(&Error::Io(
            std::io::ErrorKind::BrokenPipe.into()
        )));
        assert!(!worth_reconnecting(&Error::Rejected {
            code: ErrorCode::INVALID_REQUEST,
            text: String::new()
        }));
        assert!(!worth_reconnecting(&Error::InvalidArgument("x".into())));
        // Only the open of a reconnecting publisher tries again after BUSY.
        let busy = Error::Rejected {
            code: ErrorCode::BUSY,
            text: String::new(),
        };
        assert!(!worth_reconnecting(&busy) && router_busy(&busy));
    }
}
