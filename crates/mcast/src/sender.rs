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
    /// Receivers whose flow reports are kept (64); the stalest is forgotten first.
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
    /// Datagrams from another session, or malformed.
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

/// One multicast stream's sender. Single-threaded; the caller owns IO and time.
pub struct Sender {
    cfg: SenderConfig,
    slots: Vec<Slot>,
    /// The sequence of the open datagram (the one being filled), or of the next one.
    next_seq: u64,
    next_msg: u64,
    pending: VecDeque<Tx>,
    heartbeat: [u8; HEADER_LEN],
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
            self.queue_heartbeat(now);
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
        } else if let Some(r) = self.receivers.iter_mut().min_by_key(|r| r.at) {
            *r = report;
        }
    }

    fn queue_heartbeat(&mut self, now: MonoNanos) {
        if self.pending.len() < MAX_PENDING {
            self.pending.push_back(Tx::Heartbeat);
            self.last_send = now;
        }
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
