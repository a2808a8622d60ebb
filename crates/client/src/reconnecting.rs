//! A direct (pub/sub) client that survives router restarts: reconnect with backoff,
//! restore subscriptions, buffer publishes while disconnected.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tickwire_wire::topic::{validate_pattern, validate_topic};

use crate::backoff::Backoff;
use crate::client::{BatchOutcome, Refused};
use crate::publisher::worth_reconnecting;
use crate::{Client, Error, ErrorCode, Message, ReconnectOptions, Wait};

/// Topics whose last SEQ is remembered for [`LinkStats::missed_by_seq`]; messages on
/// further topics are not checked (counted in [`LinkStats::seq_topics_untracked`]).
pub const SEQ_TOPICS: usize = 4096;

/// What [`ReconnectingClient::poll`] reports: messages, and the connection going down
/// and coming back.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum LinkEvent<'a> {
    /// A message, borrowing the receive buffer.
    Message(Message<'a>),
    /// The connection was lost; the client is reconnecting. Messages published while
    /// it is down are not delivered to it (direct messaging keeps nothing).
    Disconnected {
        /// Why, for a person.
        reason: &'a str,
    },
    /// A new connection is up and every subscription restored.
    Reconnected(&'a Outage),
}

/// One disconnection, as reported by [`LinkEvent::Reconnected`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outage {
    /// From the loss to the restored subscriptions.
    pub down_for: Duration,
    /// Connection attempts it took (the successful one included).
    pub attempts: u32,
    /// Subscriptions sent again.
    pub resubscribed: usize,
    /// Publishes made while disconnected and sent on the new connection.
    pub republished: usize,
}

/// What a [`ReconnectingClient`] counted, over all its connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Connections lost.
    pub disconnects: u64,
    /// Connections opened after a loss.
    pub reconnects: u64,
    /// Connection attempts that failed.
    pub failed_attempts: u64,
    /// Total time without a connection (finished outages).
    pub time_disconnected: Duration,
    /// Messages the router discarded for this (slow) subscriber (the DISCARDS field).
    pub discarded_by_router: u64,
    /// Messages missing by sequence number: for messages that carry SEQ, the sum of
    /// the jumps `seq - last - 1` per topic. With a publisher that numbers its
    /// messages (see `docs/protocol.md`, SEQ), this is what an outage cost.
    pub missed_by_seq: u64,
    /// Messages with SEQ on topics beyond [`SEQ_TOPICS`], not checked.
    pub seq_topics_untracked: u64,
    /// Messages received that carried SEQ: while this is 0, `missed_by_seq` counts
    /// nothing (the publishers number nothing), so 0 missing means nothing then.
    pub numbered: u64,
    /// Publishes taken into the offline buffer while disconnected.
    pub offline_published: u64,
    /// Publishes refused because the offline buffer was full.
    pub offline_refused: u64,
}

/// A pub/sub connection kept up across connection losses.
///
/// The first connection must succeed ([`ReconnectingClient::connect`] returns its
/// error, so a wrong address is reported at once). After that, a lost connection
/// (end of stream, reset, the router closing or shutting down, a write that makes no
/// progress) is reported as [`LinkEvent::Disconnected`] by the next
/// [`ReconnectingClient::poll`], and the client connects again: the first attempt at
/// once, then after pauses growing from [`ReconnectOptions::initial_backoff`] to
/// [`ReconnectOptions::max_backoff`] with jitter. On success it subscribes again to
/// every pattern, sends the publishes buffered meanwhile and reports
/// [`LinkEvent::Reconnected`]. It gives up, returning the last error, when
/// [`ReconnectOptions::give_up_after`] passes without a connection.
///
/// Attempts are made inside the calls (`poll`, `publish`, `flush`, `subscribe`), never
/// on a thread of their own: a client that is not called does not reconnect.
///
/// While disconnected, [`ReconnectingClient::publish`] keeps the message (up to
/// [`ReconnectOptions::offline_buffer_bytes`] of topics and payloads, then
/// [`Error::OfflineBufferFull`]). Publishes that were in the old connection's
/// transmit buffer, and messages routed to it but not yet read, are lost with it.
///
/// ```no_run
/// use std::time::Duration;
/// use tickwire_client::{LinkEvent, ReconnectOptions, ReconnectingClient, Wait};
///
/// fn main() -> Result<(), tickwire_client::Error> {
///     let mut c = ReconnectingClient::connect("127.0.0.1:7420", ReconnectOptions::default())?;
///     c.subscribe("md/>")?;
///     loop {
///         c.poll(Wait::Timeout(Duration::from_millis(100)), |ev| match ev {
///             LinkEvent::Message(m) => println!("{} {:?}", m.topic(), m.payload()),
///             LinkEvent::Disconnected { reason } => eprintln!("lost the router: {reason}"),
///             LinkEvent::Reconnected(o) => eprintln!("back after {:?}", o.down_for),
///             _ => {}
///         })?;
///     }
/// }
/// ```
#[derive(Debug)]
pub struct ReconnectingClient {
    addr: String,
    opts: ReconnectOptions,
    conn: Option<Client>,
    /// Patterns subscribed, in order, restored on every new connection (with an initial
    /// image again when the flag says so).
    subs: Vec<(String, bool)>,
    backoff: Backoff,
    /// While disconnected: when the outage began, the attempts so far, the next one.
    down: Option<Down>,
    /// Publishes made while disconnected: `u32 topic length, u32 payload length,
    /// topic, payload`, repeated.
    offline: Vec<u8>,
    offline_count: usize,
    /// Reports not yet handed to the application, oldest first.
    notices: Vec<Notice>,
    last_seq: HashMap<Box<str>, u64>,
    stats: LinkStats,
}

#[derive(Debug)]
struct Down {
    since: Instant,
    attempts: u32,
    next_attempt: Instant,
    reason: String,
    /// What lost the connection, for a client that does not reconnect at all
    /// (`give_up_after` zero).
    cause: Option<Error>,
}

#[derive(Debug)]
enum Notice {
    Disconnected(String),
    Reconnected(Outage),
}

impl ReconnectingClient {
    /// Connects to `addr` (which must answer now) with `opts.client`.
    pub fn connect(addr: &str, opts: ReconnectOptions) -> Result<ReconnectingClient, Error> {
        let conn = Client::connect_to(addr, opts.client.clone())?;
        Ok(ReconnectingClient {
            addr: addr.to_owned(),
            backoff: opts.backoff(),
            opts,
            conn: Some(conn),
            subs: Vec::new(),
            down: None,
            offline: Vec::new(),
            offline_count: 0,
            notices: Vec::new(),
            last_seq: HashMap::new(),
            stats: LinkStats::default(),
        })
    }

    /// Subscribes to `pattern` (restored after every reconnection). While
    /// disconnected it is only recorded, and sent with the others on reconnection.
    pub fn subscribe(&mut self, pattern: &str) -> Result<(), Error> {
        self.add_subscription(pattern, false)
    }

    /// [`Client::subscribe_many`]: up to [`SUBSCRIBE_PIPELINE`](crate::SUBSCRIBE_PIPELINE)
    /// SUBSCRIBEs in flight at once, every pattern restored after every reconnection
    /// (pipelined the same way) except those the router refused (the error names the
    /// first and counts them). While disconnected they are only recorded, and sent with
    /// the others on reconnection.
    pub fn subscribe_many<S: AsRef<str>>(&mut self, patterns: &[S]) -> Result<(), Error> {
        let refused = self.batch(patterns, Client::subscribe_batch)?;
        let mut skip = refused.indexes.iter().copied().peekable();
        for (i, p) in patterns.iter().enumerate() {
            if skip.next_if_eq(&i).is_none() {
                self.subs.push((p.as_ref().to_owned(), false));
            }
        }
        refused.into_result(patterns)
    }

    /// Checks `patterns`, then runs `batch` (pipelined SUBSCRIBEs or UNSUBSCRIBEs) on
    /// the connection, if any: the patterns it refused. A lost connection is handled as
    /// everywhere (the refusals received before it stand).
    fn batch<S: AsRef<str>>(
        &mut self,
        patterns: &[S],
        batch: fn(&mut Client, &[S]) -> Result<BatchOutcome, Error>,
    ) -> Result<Refused, Error> {
        for p in patterns {
            validate_pattern(p.as_ref().as_bytes()).map_err(Error::InvalidPattern)?;
        }
        self.reconnect_if_due()?;
        let Some(c) = &mut self.conn else {
            return Ok(Refused::default());
        };
        let (refused, failed) =
            batch(c, patterns).unwrap_or_else(|e| (Refused::default(), Some(e)));
        match failed {
            None => {}
            Some(e) if worth_reconnecting(&e) => self.lost_or_fail(e)?,
            Some(e) => return Err(e),
        }
        Ok(refused)
    }

    /// [`Client::subscribe_with_image`], restored after every reconnection with a new
    /// image (from the new connection's router: what it cached since it started). When
    /// the same router is still up (a dropped connection, not a restart), the new image
    /// may repeat last values delivered before the loss; they are flagged
    /// [`Message::cached`](crate::Message::cached) like every image message.
    pub fn subscribe_with_image(&mut self, pattern: &str) -> Result<(), Error> {
        self.add_subscription(pattern, true)
    }

    fn add_subscription(&mut self, pattern: &str, image: bool) -> Result<(), Error> {
        validate_pattern(pattern.as_bytes()).map_err(Error::InvalidPattern)?;
        self.reconnect_if_due()?;
        if let Some(c) = &mut self.conn {
            let res = match image {
                true => c.subscribe_with_image(pattern),
                false => c.subscribe(pattern),
            };
            match res {
                Ok(()) => {}
                Err(e) if worth_reconnecting(&e) => self.lost_or_fail(e)?,
                Err(e) => return Err(e),
            }
        }
        self.subs.push((pattern.to_owned(), image));
        Ok(())
    }

    /// Removes `pattern` (exactly as subscribed) from the subscriptions.
    pub fn unsubscribe(&mut self, pattern: &str) -> Result<(), Error> {
        validate_pattern(pattern.as_bytes()).map_err(Error::InvalidPattern)?;
        self.reconnect_if_due()?;
        if let Some(c) = &mut self.conn {
            match c.unsubscribe(pattern) {
                Ok(()) => {}
                Err(e) if worth_reconnecting(&e) => self.lost_or_fail(e)?,
                Err(e) => return Err(e),
            }
        }
        // The router holds a pattern once however often it was subscribed.
        self.subs.retain(|(p, _)| p != pattern);
        Ok(())
    }

    /// [`Client::unsubscribe_many`]: each pattern (exactly as subscribed) is removed
    /// from the subscriptions restored on reconnection, except those the router
    /// refused (the error names the first and counts them). While disconnected they
    /// are only removed.
    pub fn unsubscribe_many<S: AsRef<str>>(&mut self, patterns: &[S]) -> Result<(), Error> {
        let refused = self.batch(patterns, Client::unsubscribe_batch)?;
        // Every recorded copy of each pattern unsubscribed, as `unsubscribe` does.
        let mut skip = refused.indexes.iter().copied().peekable();
        let gone: std::collections::HashSet<&str> = patterns
            .iter()
            .enumerate()
            .filter(|(i, _)| skip.next_if_eq(i).is_none())
            .map(|(_, p)| p.as_ref())
            .collect();
        self.subs.retain(|(p, _)| !gone.contains(p.as_str()));
        refused.into_result(patterns)
    }

    /// Publishes (batched like [`Client::publish`]); while disconnected the message
    /// goes into the offline buffer, or fails with [`Error::OfflineBufferFull`].
    pub fn publish(&mut self, topic: &str, payload: &[u8]) -> Result<(), Error> {
        validate_topic(topic.as_bytes()).map_err(Error::InvalidTopic)?;
        self.reconnect_if_due()?;
        if let Some(c) = &mut self.conn {
            match c.publish(topic, payload) {
                Ok(()) => return Ok(()),
                Err(e) if worth_reconnecting(&e) => self.lost_or_fail(e)?,
                Err(e) => return Err(e),
            }
        }
        self.keep_offline(topic, payload)
    }

    /// Writes pending publishes (a no-op while disconnected: they are kept).
    pub fn flush(&mut self) -> Result<(), Error> {
        self.reconnect_if_due()?;
        if let Some(c) = &mut self.conn {
            if let Err(e) = c.flush() {
                if !worth_reconnecting(&e) {
                    return Err(e);
                }
                self.lost_or_fail(e)?;
            }
        }
        Ok(())
    }

    /// Flushes, then calls `handler` for every message and connection report
    /// available, waiting per `wait` if there is none; reconnects when due (sleeping
    /// in the backoff pause while within `wait`). Returns how many events were handled.
    ///
    /// Fails only with an error a new connection would not cure, or when
    /// [`ReconnectOptions::give_up_after`] passed without a connection.
    pub fn poll<F: FnMut(LinkEvent<'_>)>(
        &mut self,
        wait: Wait,
        mut handler: F,
    ) -> Result<usize, Error> {
        let deadline = match wait {
            Wait::Timeout(d) => Instant::now().checked_add(d),
            Wait::NoWait => Some(Instant::now()),
            Wait::Forever => None,
        };
        let mut n = 0;
        loop {
            n += self.deliver_notices(&mut handler);
            if n > 0 {
                return Ok(n);
            }
            let Some(c) = &mut self.conn else {
                let now = Instant::now();
                let due = self.down.as_ref().map_or(now, |d| d.next_attempt);
                if due <= now {
                    self.attempt()?;
                    continue;
                }
                match deadline {
                    Some(d) if d <= now => return Ok(0),
                    Some(d) => std::thread::sleep(due.min(d) - now),
                    None => std::thread::sleep(due - now),
                }
                continue;
            };
            let left = match deadline {
                None => Wait::Forever,
                Some(d) => Wait::Timeout(d.saturating_duration_since(Instant::now())),
            };
            let (stats, last_seq) = (&mut self.stats, &mut self.last_seq);
            let polled = c.poll(left, |m| {
                track(stats, last_seq, &m);
                handler(LinkEvent::Message(m));
                n += 1;
            });
            match polled {
                Ok(_) => return Ok(n),
                Err(e) if worth_reconnecting(&e) => {
                    self.lost(e);
                    if n > 0 {
                        return Ok(n);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether a connection is up now.
    /// No more reconnection from now on (a command that is stopping): a lost
    /// connection is then the error, as with a `give_up_after` of zero.
    pub fn stop_reconnecting(&mut self) {
        self.opts.give_up_after = Some(Duration::ZERO);
    }

    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// The counters.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Total time without a connection, the outage under way included
    /// ([`LinkStats::time_disconnected`] counts finished outages only).
    pub fn time_disconnected(&self) -> Duration {
        let current = self
            .down
            .as_ref()
            .map_or(Duration::ZERO, |d| d.since.elapsed());
        self.stats.time_disconnected + current
    }

    /// The patterns restored on reconnection.
    pub fn subscriptions(&self) -> impl Iterator<Item = &str> + '_ {
        self.subs.iter().map(|(p, _)| p.as_str())
    }

    /// Bytes (and publishes) waiting in the offline buffer.
    pub fn offline_buffered(&self) -> (usize, usize) {
        (self.offline.len(), self.offline_count)
    }

    /// The current connection, if one is up (for its id, stats, a ping).
    pub fn client(&mut self) -> Option<&mut Client> {
        self.conn.as_mut()
    }

    /// Closes the current connection (see [`Client::close`]); buffered offline
    /// publishes are dropped.
    pub fn close(self) -> Result<(), Error> {
        match self.conn {
            Some(c) => c.close(),
            None => Ok(()),
        }
    }

    /// Calls `handler` for the connection reports ([`LinkEvent::Disconnected`],
    /// [`LinkEvent::Reconnected`]) noticed since the last call, without reading or
    /// waiting; returns how many. For a client that only publishes and so never
    /// calls [`ReconnectingClient::poll`]: `publish` and `flush` notice a lost
    /// connection and reconnect, and this tells of it.
    pub fn take_notices<F: FnMut(LinkEvent<'_>)>(&mut self, mut handler: F) -> usize {
        self.deliver_notices(&mut handler)
    }

    fn deliver_notices<F: FnMut(LinkEvent<'_>)>(&mut self, handler: &mut F) -> usize {
        let n = self.notices.len();
        for notice in self.notices.drain(..) {
            match &notice {
                Notice::Disconnected(reason) => handler(LinkEvent::Disconnected { reason }),
                Notice::Reconnected(o) => handler(LinkEvent::Reconnected(o)),
            }
        }
        n
    }

    /// [`ReconnectingClient::lost`], except that a client that never reconnects
    /// (`give_up_after` zero) fails with `cause` at once: a publish would otherwise be
    /// kept for a reconnection that never comes, and reported as done (review).
    fn lost_or_fail(&mut self, cause: Error) -> Result<(), Error> {
        let once = self.opts.give_up_after == Some(Duration::ZERO);
        self.lost(cause);
        match (once, self.down.as_mut().and_then(|d| d.cause.take())) {
            (true, Some(cause)) => Err(cause),
            (_, cause) => {
                if let Some(d) = self.down.as_mut() {
                    d.cause = cause;
                }
                Ok(())
            }
        }
    }

    /// The connection failed with `cause`: drop it and schedule the first attempt now.
    fn lost(&mut self, cause: Error) {
        if let Some(mut c) = self.conn.take() {
            // Its unsent bytes are lost with it; dropping must not wait to flush them.
            c.abandon_tx();
        }
        let now = Instant::now();
        let reason = cause.to_string();
        self.stats.disconnects += 1;
        self.backoff.reset();
        self.notices.push(Notice::Disconnected(reason.clone()));
        self.down = Some(Down {
            since: now,
            attempts: 0,
            next_attempt: now,
            reason,
            cause: Some(cause),
        });
    }

    fn reconnect_if_due(&mut self) -> Result<(), Error> {
        match &self.down {
            Some(d) if self.conn.is_none() && d.next_attempt <= Instant::now() => self.attempt(),
            _ => Ok(()),
        }
    }

    /// One connection attempt; on failure the next is scheduled. Errs only when
    /// giving up or on an error a new connection would not cure.
    fn attempt(&mut self) -> Result<(), Error> {
        let Some(down) = &mut self.down else {
            return Ok(());
        };
        if self.opts.give_up_after == Some(Duration::ZERO) {
            // No reconnection at all (`tickwire pub --no-reconnect` reconnected once:
            // hostile-input pass): the cause is the error.
            return Err(down
                .cause
                .take()
                .unwrap_or_else(|| Error::Io(std::io::Error::other(down.reason.clone()))));
        }
        down.attempts += 1;
        let outcome = open(
            &self.addr,
            &self.opts,
            &self.subs,
            &self.offline,
            self.offline_count,
        );
        let down = match outcome {
            Ok(c) => {
                let Some(down) = self.down.take() else {
                    return Ok(());
                };
                self.conn = Some(c);
                let down_for = down.since.elapsed();
                self.stats.reconnects += 1;
                self.stats.time_disconnected += down_for;
                self.notices.push(Notice::Reconnected(Outage {
                    down_for,
                    attempts: down.attempts,
                    resubscribed: self.subs.len(),
                    republished: self.offline_count,
                }));
                self.offline.clear();
                self.offline_count = 0;
                self.backoff.reset();
                return Ok(());
            }
            Err(e) => {
                self.stats.failed_attempts += 1;
                // A BUSY (an initial image the router has no budget for now) is
                // "ask again later": the next attempt does.
                let busy = matches!(&e, Error::Rejected { code, .. } if *code == ErrorCode::BUSY);
                if !worth_reconnecting(&e) && !busy {
                    // Still paced: a caller that keeps going does not reconnect (and
                    // restore every subscription) on every call.
                    down.next_attempt = Instant::now() + self.backoff.next_pause();
                    return Err(e);
                }
                let expired = self
                    .opts
                    .give_up_after
                    .is_some_and(|limit| down.since.elapsed() >= limit);
                if expired {
                    return Err(e);
                }
                down.reason = e.to_string();
                down
            }
        };
        down.next_attempt = Instant::now() + self.backoff.next_pause();
        Ok(())
    }

    fn keep_offline(&mut self, topic: &str, payload: &[u8]) -> Result<(), Error> {
        let need = 8 + topic.len() + payload.len();
        let limit = self.opts.offline_buffer_bytes;
        if self.offline.len() + need > limit {
            self.stats.offline_refused += 1;
            return Err(Error::OfflineBufferFull { limit });
        }
        // Both fit in u32: a topic is at most 250 bytes and the buffer limit bounds
        // the payload... unless the limit itself exceeds 4 GiB, refused here.
        let (Ok(tl), Ok(pl)) = (u32::try_from(topic.len()), u32::try_from(payload.len())) else {
            self.stats.offline_refused += 1;
            return Err(Error::OfflineBufferFull { limit });
        };
        self.offline.extend_from_slice(&tl.to_le_bytes());
        self.offline.extend_from_slice(&pl.to_le_bytes());
        self.offline.extend_from_slice(topic.as_bytes());
        self.offline.extend_from_slice(payload);
        self.offline_count += 1;
        self.stats.offline_published += 1;
        Ok(())
    }
}

/// Connects, subscribes to `subs`, sends the `offline` publishes and flushes. A
/// subscription the new router refuses (a lower limit, a permission taken away) is
/// the attempt's error, naming the pattern: not worth reconnecting, so the caller
/// hears of it (a `BUSY`, "ask again later", is retried by the next attempt).
fn open(
    addr: &str,
    opts: &ReconnectOptions,
    subs: &[(String, bool)],
    offline: &[u8],
    count: usize,
) -> Result<Client, Error> {
    let mut c = Client::connect_to(addr, opts.client.clone())?;
    // A refusal here is of a subscription taken before: said so, as the caller did not
    // just ask for it (new-user pass: it read as a fresh request refused).
    let restoring = |e: Error| match e {
        Error::Rejected { code, text } => Error::Rejected {
            code,
            text: format!("restoring the subscriptions after reconnecting: {text}"),
        },
        e => e,
    };
    // Runs of plain patterns go pipelined; each image waits for its own answer.
    let mut rest = subs;
    while let Some(((p, image), after)) = rest.split_first() {
        if *image {
            c.subscribe_with_image(p)
                .map_err(|e| match e {
                    // Named once (the router's refusal usually names it).
                    Error::Rejected { code, text } if text.contains(&format!("{p:?}")) => {
                        Error::Rejected { code, text }
                    }
                    Error::Rejected { code, text } => Error::Rejected {
                        code,
                        text: format!("{p:?}: {text}"),
                    },
                    e => e,
                })
                .map_err(restoring)?;
            rest = after;
            continue;
        }
        let run = rest.iter().take_while(|(_, image)| !image).count();
        let (plain, after) = rest.split_at(run);
        let patterns: Vec<&str> = plain.iter().map(|(p, _)| p.as_str()).collect();
        c.subscribe_many(&patterns).map_err(restoring)?;
        rest = after;
    }
    let mut rest = offline;
    for _ in 0..count {
        let (topic, payload, tail) = split_record(rest)
            .ok_or_else(|| Error::Protocol("internal: offline buffer damaged".into()))?;
        let topic = std::str::from_utf8(topic)
            .map_err(|_| Error::Protocol("internal: offline topic not UTF-8".into()))?;
        c.publish(topic, payload)?;
        rest = tail;
    }
    c.flush()?;
    Ok(c)
}

fn split_record(b: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let tl = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
    let pl = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?) as usize;
    let topic = b.get(8..8 + tl)?;
    let payload = b.get(8 + tl..8 + tl + pl)?;
    Some((topic, payload, &b[8 + tl + pl..]))
}

/// Counts what the router discarded and, for numbered messages, what went missing.
fn track(stats: &mut LinkStats, last_seq: &mut HashMap<Box<str>, u64>, m: &Message<'_>) {
    stats.discarded_by_router += m.discarded();
    let Some(seq) = m.seq() else { return };
    stats.numbered += 1;
    if let Some(last) = last_seq.get_mut(m.topic()) {
        if seq > last.saturating_add(1) {
            stats.missed_by_seq += seq - *last - 1;
        }
        *last = seq;
    } else if last_seq.len() < SEQ_TOPICS {
        last_seq.insert(m.topic().into(), seq);
    } else {
        stats.seq_topics_untracked += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_records_split_back() {
        let mut b = Vec::new();
        for (t, p) in [("a/b", &b"xy"[..]), ("c", &b""[..])] {
            b.extend_from_slice(&(t.len() as u32).to_le_bytes());
            b.extend_from_slice(&(p.len() as u32).to_le_bytes());
            b.extend_from_slice(t.as_bytes());
            b.extend_from_slice(p);
        }
        let (t, p, rest) = split_record(&b).unwrap();
        assert_eq!((t, p), (&b"a/b"[..], &b"xy"[..]));
        let (t, p, rest) = split_record(rest).unwrap();
        assert_eq!((t, p, rest), (&b"c"[..], &b""[..], &b""[..]));
        assert!(split_record(&b[..5]).is_none());
    }
}
