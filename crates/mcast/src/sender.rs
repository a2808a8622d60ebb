//! The sending side (pure): frames into sequenced datagrams, a bounded retransmission
//! buffer, rate-limited retransmissions, heartbeats, receivers' flow reports.
//!
//! Drive it like this (single-threaded; the caller owns the socket and the clock):
//!
//! ```text
//! publish(now, topic, payload)*  → flush(now) → while let Some(d) = poll_transmit() { send d to the group }
//! datagram from a receiver       → handle_nak(now, bytes) → drain poll_transmit, poll_event
//! at poll_timeout()              → handle_timer(now)      → drain poll_transmit
//! ```
//!
//! Per message: one `memcpy` of the frame into the open datagram's slot of the ring; no
//! allocation (slots are allocated once, at their full size), no lock, no syscall (the
//! driver sends one datagram per `poll_transmit`).

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::time::Duration;

use tickwire_rt::{MonoNanos, TokenBucket};
use tickwire_wire::frame::{encode_publish, PublishOptions};
use tickwire_wire::topic::validate_topic;

use crate::packet::{self, Datagram, DecodeError, Header, Kind, HEADER_LEN};
use crate::{Error, SessionId};

/// The sender's settings. Every field has a default ([`SenderConfig::default`]).
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// This stream's session id; receivers never mix two sessions. Choose it at random
    /// at start (the drivers do).
    pub session: SessionId,
    /// Largest datagram, header included (256 ..= 65507; 1400 by default, under an
    /// Ethernet MTU). A message whose frame does not fit in one datagram is refused.
    pub max_datagram: usize,
    /// Datagrams kept for retransmission (the retransmission buffer), 4096 by default:
    /// `buffer_datagrams × max_datagram` bytes, allocated at start.
    pub buffer_datagrams: usize,
    /// A heartbeat goes out when nothing was sent for this long (10 ms), so receivers
    /// see loss at the tail of a burst.
    pub heartbeat_interval: Duration,
    /// A datagram is not retransmitted twice within this time (2 ms): NAKs from many
    /// receivers for one loss cause one retransmission.
    pub retransmit_linger: Duration,
    /// Retransmission budget in bytes per second (64 MiB/s); NAKs beyond it are
    /// dropped (receivers ask again).
    pub retransmit_rate: u64,
    /// Retransmission burst: the most bytes retransmitted at once (1 MiB).
    pub retransmit_burst: u64,
    /// Receivers whose flow reports are kept (64). When all are taken, a new receiver's
    /// report replaces the stalest one only if that one is older than
    /// [`REPORT_EXPIRY`]; otherwise it is refused (`status_refused`), so a flood of
    /// made-up receiver ids cannot push out receivers that keep reporting.
    pub max_receivers: usize,
}

impl Default for SenderConfig {
    fn default() -> Self {
        SenderConfig {
            session: SessionId(1),
            max_datagram: 1400,
            buffer_datagrams: 4096,
            heartbeat_interval: Duration::from_millis(10),
            retransmit_linger: Duration::from_millis(2),
            retransmit_rate: 64 << 20,
            retransmit_burst: 1 << 20,
            max_receivers: 64,
        }
    }
}

impl SenderConfig {
    /// Checks the bounds; the error names the setting.
    pub fn validate(&self) -> Result<(), Error> {
        if !(packet::MIN_DATAGRAM..=packet::MAX_DATAGRAM).contains(&self.max_datagram) {
            return Err(Error::Config(format!(
                "max datagram {} is outside 256..=65507 bytes",
                self.max_datagram
            )));
        }
        if !(2..=1 << 20).contains(&self.buffer_datagrams) {
            return Err(Error::Config(format!(
                "retransmission buffer of {} datagrams is outside 2..=1048576",
                self.buffer_datagrams
            )));
        }
        if self.heartbeat_interval.is_zero() {
            return Err(Error::Config("heartbeat interval must be above 0".into()));
        }
        if self.max_receivers == 0 {
            return Err(Error::Config("max receivers must be at least 1".into()));
        }
        Ok(())
    }
}

/// Why a message was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The topic is not a valid tickwire topic (docs/protocol.md).
    #[error("invalid topic {0:?}")]
    BadTopic(String),
    /// The frame does not fit in one datagram (no fragmentation).
    #[error("message of {len} bytes does not fit in a {max}-byte datagram")]
    TooLarge { len: usize, max: usize },
}

/// Something the application may want to know; drained with [`Sender::poll_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderEvent {
    /// A receiver asked for datagrams no longer in the buffer: it will report the gap.
    Unrecoverable { receiver: u64, from: u64, to: u64 },
}

/// One receiver's latest flow report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiverReport {
    /// The id it chose.
    pub receiver: u64,
    /// The next datagram it expects.
    pub expected: u64,
    /// Messages it delivered in this session (not counting an earlier one it heard).
    pub delivered: u64,
    /// Datagrams sent that it had not yet received, when it told.
    pub behind: u64,
    /// When its report arrived.
    pub at: MonoNanos,
}

/// Counters, owned by the sender.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    pub messages: u64,
    pub datagrams: u64,
    pub heartbeats: u64,
    pub naks: u64,
    pub retransmitted: u64,
    /// Asked again within the linger: one retransmission served them.
    pub nak_suppressed: u64,
    /// Over the retransmission budget.
    pub nak_rate_limited: u64,
    /// Asked for datagrams already gone from the buffer.
    pub nak_unrecoverable: u64,
    /// Unrecoverable NAKs not answered with a heartbeat of their own: one was queued
    /// already, or one went out less than a heartbeat interval ago.
    pub nak_heartbeat_suppressed: u64,
    /// Flow reports from a new receiver not kept: every slot held a fresh report.
    pub status_refused: u64,
    /// Datagrams from another session, malformed, or flow reports claiming more than
    /// was sent.
    pub refused: u64,
    /// Originals not queued because the driver did not drain; they are recovered by NAK.
    pub unsent: u64,
}

struct Slot {
    seq: u64,
    count: u16,
    first_msg: u64,
    /// When it was last retransmitted (0: never).
    last_tx: MonoNanos,
    bytes: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
enum Tx {
    Original(u64),
    Retransmit(u64),
    Heartbeat,
}

const EMPTY: u64 = u64::MAX;
const MAX_PENDING: usize = 1024;
const MAX_EVENTS: usize = 256;

/// A flow report older than this may be replaced by a new receiver's (receivers report
/// every 100 ms by default, so a live one is never this stale).
pub const REPORT_EXPIRY: Duration = Duration::from_secs(1);

/// One multicast stream's sender. Single-threaded; the caller owns IO and time.
pub struct Sender {
    cfg: SenderConfig,
    slots: Vec<Slot>,
    /// The sequence of the open datagram (the one being filled), or of the next one.
    next_seq: u64,
    next_msg: u64,
    pending: VecDeque<Tx>,
    heartbeat: [u8; HEADER_LEN],
    /// A heartbeat is in `pending`: another one would say the same.
    heartbeat_queued: bool,
    /// When a NAK last caused a heartbeat (`None`: never). At most one per
    /// `heartbeat_interval`, so forged NAKs cannot make the sender flood the group.
    nak_heartbeat_at: Option<MonoNanos>,
    last_send: MonoNanos,
    /// Retransmission budget: `retransmit_rate` bytes per second, `retransmit_burst`.
    budget: TokenBucket,
    receivers: Vec<ReceiverReport>,
    events: VecDeque<SenderEvent>,
    stats: SenderStats,
}

impl Sender {
    /// A sender starting at datagram 0 and message 0.
    pub fn new(cfg: SenderConfig, now: MonoNanos) -> Result<Sender, Error> {
        cfg.validate()?;
        let slots = (0..cfg.buffer_datagrams)
            .map(|_| Slot {
                seq: EMPTY,
                count: 0,
                first_msg: 0,
                last_tx: MonoNanos(0),
                bytes: Vec::with_capacity(cfg.max_datagram),
            })
            .collect();
        Ok(Sender {
            budget: TokenBucket::full(cfg.retransmit_rate, cfg.retransmit_burst, now),
            slots,
            next_seq: 0,
            next_msg: 0,
            pending: VecDeque::with_capacity(MAX_PENDING),
            heartbeat: [0; HEADER_LEN],
            heartbeat_queued: false,
            nak_heartbeat_at: None,
            last_send: now,
            receivers: Vec::with_capacity(cfg.max_receivers),
            events: VecDeque::with_capacity(MAX_EVENTS),
            stats: SenderStats::default(),
            cfg,
        })
    }

    /// This stream's session id.
    pub fn session(&self) -> SessionId {
        self.cfg.session
    }

    /// Counters so far.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// The latest flow report of each receiver heard from (at most `max_receivers`).
    pub fn receivers(&self) -> &[ReceiverReport] {
        &self.receivers
    }

    /// The next message index (messages published so far).
    pub fn next_msg(&self) -> u64 {
        self.next_msg
    }

    /// The next datagram's sequence: after [`Sender::flush`], the first datagram that
    /// carries message [`Sender::next_msg`].
    pub fn next_seq(&self) -> u64 {
        let open = self.open_slot().is_some_and(|i| self.slots[i].count > 0);
        self.next_seq + u64::from(open)
    }

    /// The oldest datagram still retained.
    pub fn low(&self) -> u64 {
        let n = self.slots.len() as u64;
        let open = u64::from(self.open_slot().is_some());
        (self.next_seq + open).saturating_sub(n)
    }

    fn index(&self, seq: u64) -> usize {
        (seq % self.slots.len() as u64) as usize
    }

    fn open_slot(&self) -> Option<usize> {
        let i = self.index(self.next_seq);
        (self.slots[i].seq == self.next_seq).then_some(i)
    }

    /// Appends one message to the open datagram (opening one if needed, closing the open
    /// one if the message does not fit). Returns the message's index in the stream.
    /// Nothing is sent before [`Sender::flush`] or a full datagram.
    pub fn publish(
        &mut self,
        now: MonoNanos,
        topic: &str,
        payload: &[u8],
        opts: PublishOptions,
    ) -> Result<u64, SendError> {
        if validate_topic(topic.as_bytes()).is_err() {
            return Err(SendError::BadTopic(topic.to_owned()));
        }
        let max = self.cfg.max_datagram;
        for attempt in 0..2 {
            let i = match self.open_slot() {
                Some(i) if self.slots[i].count < u16::MAX => i,
                Some(_) => {
                    self.flush(now);
                    continue;
                }
                None => self.open(),
            };
            let slot = &mut self.slots[i];
            let room = max - slot.bytes.len();
            // Encoding checks the length against `room` before writing anything.
            match encode_publish(&mut slot.bytes, topic, payload, opts, room as u32) {
                Ok(()) => {
                    slot.count += 1;
                    let index = self.next_msg;
                    self.next_msg += 1;
                    self.stats.messages += 1;
                    return Ok(index);
                }
                Err(_) if attempt == 0 && slot.count > 0 => self.flush(now),
                Err(_) => break,
            }
        }
        // An empty datagram stays open: the next message uses it.
        let len = tickwire_wire::frame::HEADER_LEN + topic.len() + payload.len();
        Err(SendError::TooLarge { len, max })
    }

    fn open(&mut self) -> usize {
        let i = self.index(self.next_seq);
        let slot = &mut self.slots[i];
        slot.seq = self.next_seq;
        slot.count = 0;
        slot.first_msg = self.next_msg;
        slot.last_tx = MonoNanos(0);
        slot.bytes.clear();
        slot.bytes.resize(HEADER_LEN, 0);
        i
    }

    /// Closes the open datagram (if it holds a message) and queues it for sending.
    pub fn flush(&mut self, now: MonoNanos) {
        let Some(i) = self.open_slot() else { return };
        if self.slots[i].count == 0 {
            return;
        }
        let low = self.low();
        let (session, seq) = (self.cfg.session.0, self.next_seq);
        let slot = &mut self.slots[i];
        packet::write_header(
            &mut slot.bytes,
            Header {
                kind: Kind::Data,
                flags: 0,
                session,
                count: slot.count,
                a: seq,
                b: slot.first_msg,
                c: low,
            },
        );
        // The linger is for retransmissions: a NAK right after the original is answered.
        slot.last_tx = MonoNanos(0);
        self.next_seq += 1;
        self.last_send = now;
        self.stats.datagrams += 1;
        if self.pending.len() < MAX_PENDING {
            self.pending.push_back(Tx::Original(seq));
        } else {
            self.stats.unsent += 1;
        }
    }

    /// A datagram from a receiver (NAK or STATUS). Other sessions' datagrams and
    /// malformed ones are counted and ignored; the error says why.
    pub fn handle_nak(&mut self, now: MonoNanos, bytes: &[u8]) -> Result<(), DecodeError> {
        let d = match packet::decode(bytes) {
            Ok(d) if d.session() == self.cfg.session.0 => d,
            Ok(_) => {
                self.stats.refused += 1;
                return Ok(());
            }
            Err(e) => {
                self.stats.refused += 1;
                return Err(e);
            }
        };
        match d {
            Datagram::Nak {
                from,
                count,
                receiver,
                ..
            } => self.nak(now, from, count, receiver),
            Datagram::Status {
                expected,
                receiver,
                delivered,
                ..
            } => self.status(now, expected, receiver, delivered),
            Datagram::Data { .. } | Datagram::Heartbeat { .. } => self.stats.refused += 1,
        }
        Ok(())
    }

    fn nak(&mut self, now: MonoNanos, from: u64, count: u16, receiver: u64) {
        self.stats.naks += 1;
        let low = self.low();
        let end = from.saturating_add(u64::from(count)).min(self.next_seq);
        if from < low {
            self.stats.nak_unrecoverable += 1;
            if self.events.len() < MAX_EVENTS {
                self.events.push_back(SenderEvent::Unrecoverable {
                    receiver,
                    from,
                    to: low.min(end.max(from)),
                });
            }
            // The heartbeat carries the low mark: the receiver declares the gap at once.
            // It goes to the whole group, so one per heartbeat interval tells every
            // receiver; a NAK in between (a flood of forged ones included) costs none.
            let interval = self.cfg.heartbeat_interval.as_nanos() as u64;
            let recent = self
                .nak_heartbeat_at
                .is_some_and(|at| now.saturating_sub(at) < interval);
            if self.heartbeat_queued || recent {
                self.stats.nak_heartbeat_suppressed += 1;
            } else if self.queue_heartbeat(now) {
                self.nak_heartbeat_at = Some(now);
            }
        }
        let linger = self.cfg.retransmit_linger.as_nanos() as u64;
        for seq in from.max(low)..end {
            let i = self.index(seq);
            let slot = &mut self.slots[i];
            if slot.seq != seq {
                continue;
            }
            if slot.last_tx.0 != 0 && now.saturating_sub(slot.last_tx) < linger {
                self.stats.nak_suppressed += 1;
                continue;
            }
            let len = slot.bytes.len() as u64;
            if self.pending.len() >= MAX_PENDING || !self.budget.try_take(now, len) {
                // Out of budget for this NAK: the rest waits for the receiver's next NAK.
                // Stopping here (not looking at every slot it names) bounds a NAK's work
                // by what the budget allows, not by the count a peer chose.
                self.stats.nak_rate_limited += end - seq;
                break;
            }
            slot.last_tx = now;
            self.pending.push_back(Tx::Retransmit(seq));
        }
    }

    fn status(&mut self, now: MonoNanos, expected: u64, receiver: u64, delivered: u64) {
        if expected > self.next_seq || delivered > self.next_msg {
            // More than was ever sent: forged (hostile-input pass: one such report ended
            // `mcast send --wait-receivers` early, "4611686018427387903 messages delivered").
            self.stats.refused += 1;
            return;
        }
        let report = ReceiverReport {
            receiver,
            expected,
            delivered,
            behind: self.next_seq.saturating_sub(expected),
            at: now,
        };
        if let Some(r) = self.receivers.iter_mut().find(|r| r.receiver == receiver) {
            *r = report;
        } else if self.receivers.len() < self.cfg.max_receivers {
            self.receivers.push(report);
        } else {
            // Only a report nobody refreshed for REPORT_EXPIRY gives way: receivers that
            // keep reporting keep their slots, whatever ids a flood makes up.
            let expiry = REPORT_EXPIRY.as_nanos() as u64;
            match self.receivers.iter_mut().min_by_key(|r| r.at) {
                Some(r) if now.saturating_sub(r.at) >= expiry => *r = report,
                _ => self.stats.status_refused += 1,
            }
        }
    }

    /// Queues a heartbeat unless one is queued already; false if none was queued.
    fn queue_heartbeat(&mut self, now: MonoNanos) -> bool {
        if self.heartbeat_queued {
            // The queued one goes out with the next drain; the idle timer is served.
            self.last_send = now;
            return false;
        }
        if self.pending.len() >= MAX_PENDING {
            return false;
        }
        self.pending.push_back(Tx::Heartbeat);
        self.heartbeat_queued = true;
        self.last_send = now;
        true
    }

    /// Timers: flushes an open datagram, and sends a heartbeat when idle for the
    /// heartbeat interval. Spurious calls are harmless.
    pub fn handle_timer(&mut self, now: MonoNanos) {
        self.flush(now);
        if now >= self.poll_timeout() {
            self.queue_heartbeat(now);
        }
    }

    /// When [`Sender::handle_timer`] wants to be called.
    pub fn poll_timeout(&self) -> MonoNanos {
        self.last_send.add_duration(self.cfg.heartbeat_interval)
    }

    /// The next datagram to send to the group, if any.
    pub fn poll_transmit(&mut self) -> Option<&[u8]> {
        loop {
            let tx = self.pending.pop_front()?;
            match tx {
                Tx::Original(seq) | Tx::Retransmit(seq) => {
                    let i = self.index(seq);
                    if self.slots[i].seq != seq {
                        continue; // overwritten before it was sent: a NAK recovers it
                    }
                    if let Tx::Retransmit(_) = tx {
                        let low = self.low();
                        packet::mark_retransmit(&mut self.slots[i].bytes, low);
                        self.stats.retransmitted += 1;
                    }
                    return Some(&self.slots[i].bytes);
                }
                Tx::Heartbeat => {
                    self.heartbeat_queued = false;
                    let low = self.low();
                    let next_msg = self.next_msg_sent();
                    packet::write_header(
                        &mut self.heartbeat,
                        Header {
                            kind: Kind::Heartbeat,
                            flags: 0,
                            session: self.cfg.session.0,
                            count: 0,
                            a: self.next_seq,
                            b: next_msg,
                            c: low,
                        },
                    );
                    self.stats.heartbeats += 1;
                    return Some(&self.heartbeat);
                }
            }
        }
    }

    /// The index of the first message not yet in a closed datagram.
    fn next_msg_sent(&self) -> u64 {
        match self.open_slot() {
            Some(i) => self.slots[i].first_msg,
            None => self.next_msg,
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<SenderEvent> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const T0: MonoNanos = MonoNanos(1_000_000_000);

    fn header(s: &Sender, kind: Kind, count: u16, a: u64, b: u64, c: u64) -> [u8; HEADER_LEN] {
        let mut d = [0u8; HEADER_LEN];
        packet::write_header(
            &mut d,
            Header {
                kind,
                flags: 0,
                session: s.session().0,
                count,
                a,
                b,
                c,
            },
        );
        d
    }

    /// A sender whose buffer (4 datagrams) no longer holds datagram 0.
    fn sender_past_its_buffer() -> Sender {
        let cfg = SenderConfig {
            buffer_datagrams: 4,
            ..SenderConfig::default()
        };
        let mut tx = Sender::new(cfg, T0).unwrap();
        for _ in 0..10 {
            tx.publish(T0, "t", b"x", PublishOptions::default())
                .unwrap();
            tx.flush(T0);
        }
        while tx.poll_transmit().is_some() {}
        assert!(tx.low() > 0);
        tx
    }

    fn heartbeats_sent(tx: &mut Sender) -> u64 {
        let mut n = 0;
        while let Some(d) = tx.poll_transmit() {
            if matches!(packet::decode(d), Ok(Datagram::Heartbeat { .. })) {
                n += 1;
            }
        }
        n
    }

    /// Regression: every NAK for a datagram no longer held queued a heartbeat to the
    /// whole group, outside any budget (293,800 forged NAKs in 2 s: ~136,000 datagrams).
    #[test]
    fn forged_naks_for_unheld_datagrams_cost_a_bounded_number_of_heartbeats() {
        let mut tx = sender_past_its_buffer();
        let nak = header(&tx, Kind::Nak, 1, 0, 7, 0);
        // Thousands at one instant, drained between each (the worst case for coalescing).
        let mut sent = 0;
        for _ in 0..5000 {
            tx.handle_nak(T0, &nak).unwrap();
            sent += heartbeats_sent(&mut tx);
        }
        assert_eq!(sent, 1, "one heartbeat answers them all");
        let st = tx.stats();
        assert_eq!(st.nak_unrecoverable, 5000);
        assert_eq!(st.nak_heartbeat_suppressed, 4999);
        // Not drained at all: still one queued.
        let mut tx = sender_past_its_buffer();
        for _ in 0..5000 {
            tx.handle_nak(T0, &nak).unwrap();
        }
        assert_eq!(heartbeats_sent(&mut tx), 1);
        // Spread over 2 s, 1,000 per millisecond: one per heartbeat interval (10 ms).
        let mut tx = sender_past_its_buffer();
        let mut sent = 0;
        for ms in 0..2000u64 {
            let now = T0.add_nanos(ms * 1_000_000);
            for _ in 0..1000 {
                tx.handle_nak(now, &nak).unwrap();
            }
            sent += heartbeats_sent(&mut tx);
        }
        assert!(sent <= 200, "{sent} heartbeats for 2,000,000 NAKs");
        assert!(sent >= 100, "the receivers still hear the range: {sent}");
    }

    #[test]
    fn the_first_nak_for_an_unheld_datagram_is_answered_at_once() {
        let mut tx = sender_past_its_buffer();
        let low = tx.low();
        tx.handle_nak(T0, &header(&tx, Kind::Nak, 1, 0, 7, 0))
            .unwrap();
        let d = tx.poll_transmit().unwrap();
        match packet::decode(d).unwrap() {
            Datagram::Heartbeat { low: l, .. } => assert_eq!(l, low),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            tx.poll_event(),
            Some(SenderEvent::Unrecoverable {
                receiver: 7,
                from: 0,
                to: 1
            })
        );
    }

    /// Hostile-input pass: a flow report claiming datagrams or messages never sent was
    /// kept (one ended `mcast send --wait-receivers` early, "4611686018427387903
    /// messages delivered"); it is refused.
    #[test]
    fn a_flow_report_claiming_more_than_was_sent_is_refused() {
        let mut tx = Sender::new(SenderConfig::default(), T0).unwrap();
        tx.handle_nak(T0, &header(&tx, Kind::Status, 0, 5, 1, 0))
            .unwrap();
        tx.handle_nak(T0, &header(&tx, Kind::Status, 0, 0, 2, (1 << 62) - 1))
            .unwrap();
        assert!(tx.receivers().is_empty());
        assert_eq!(tx.stats().refused, 2);
        tx.handle_nak(T0, &header(&tx, Kind::Status, 0, 0, 3, 0))
            .unwrap();
        assert_eq!(tx.receivers().len(), 1);
    }

    /// Regression: forged STATUS reports from 1,000 made-up receiver ids replaced all 64
    /// report slots.
    #[test]
    fn a_flood_of_new_receiver_ids_does_not_evict_fresh_reports() {
        let cfg = SenderConfig {
            max_receivers: 4,
            ..SenderConfig::default()
        };
        let mut tx = Sender::new(cfg, T0).unwrap();
        for id in 1..=4 {
            tx.handle_nak(T0, &header(&tx, Kind::Status, 0, 0, id, 0))
                .unwrap();
        }
        let soon = T0.add_nanos(500_000_000);
        for id in 1000..2000 {
            tx.handle_nak(soon, &header(&tx, Kind::Status, 0, 0, id, 0))
                .unwrap();
        }
        let ids: Vec<u64> = tx.receivers().iter().map(|r| r.receiver).collect();
        assert_eq!(ids, [1, 2, 3, 4]);
        assert_eq!(tx.stats().status_refused, 1000);
        // The real receivers keep reporting; a report older than the expiry gives way.
        for id in 1..=3 {
            tx.handle_nak(soon, &header(&tx, Kind::Status, 0, 0, id, 0))
                .unwrap();
        }
        let late = T0.add_duration(REPORT_EXPIRY);
        tx.handle_nak(late, &header(&tx, Kind::Status, 0, 0, 9, 0))
            .unwrap();
        let ids: Vec<u64> = tx.receivers().iter().map(|r| r.receiver).collect();
        assert_eq!(ids, [1, 2, 3, 9]);
        assert_eq!(tx.receivers().len(), 4);
    }
}
