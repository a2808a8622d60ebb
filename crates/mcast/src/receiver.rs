//! The receiving side (pure): session checks, gap detection, NAKs with randomised
//! back-off, in-order delivery, unrecoverable loss reported as a counted gap.
//!
//! Drive it like this (single-threaded; the caller owns the socket and the clock):
//!
//! ```text
//! datagram from the group  → handle_datagram(now, from, bytes)
//!                          → while let Some(ev) = poll_event() { Message / Gap / ... }
//!                          → while let Some((to, d)) = poll_transmit() { send d to `to` }
//! at poll_timeout()        → handle_timer(now) → drain poll_transmit
//! ```
//!
//! Rules (docs/multicast.md §3):
//! - The first session heard is adopted (or only the configured one); datagrams of any
//!   other session, or from another address under the adopted session, are strays:
//!   counted, ignored. Another session is adopted only after `session_timeout` of
//!   silence from the current one; the receiver then asks for what the sender still
//!   holds of it and reports the rest of its beginning as a gap (a receiver that was
//!   listening all along missed it: that is loss, not a late join).
//! - A datagram more than `max_jump` ahead of the next expected one is not believed
//!   until `confirm` consecutive datagrams agree with it.
//! - A hole (a datagram sequence skipped, or a heartbeat announcing more) arms the NAK
//!   timer at a random delay in `0..=nak_delay`; when it fires, every missing run is
//!   NAKed; it re-arms at `nak_retry` plus a random delay while anything is missing.
//!   A hole filled meanwhile (a retransmission another receiver asked for) is not NAKed:
//!   that is the suppression.
//! - Missing datagrams below the sender's low mark (every datagram carries it), or
//!   NAKed `max_nak_tries` times in vain, are given up: the next delivery is preceded by
//!   [`Event::Gap`] with the number of messages lost.
//!
//! Per datagram: one bounded copy into the hold ring (allocated once); per message, a
//! flyweight decode. No allocation, no lock, no syscall.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tickwire_rt::MonoNanos;
use tickwire_wire::frame::{self, Msg};

use crate::packet::{self, Datagram, DecodeError, Header, Kind, HEADER_LEN};
use crate::{Error, SessionId};

/// A slot holding no datagram.
const EMPTY: u64 = u64::MAX;
/// NAK datagrams per round at most.
const MAX_NAK_RUNS: usize = 16;
/// Non-message events waiting to be polled at most (`Recovered` ones beyond are dropped).
const MAX_STAGED: usize = 64;

/// The receiver's settings. Every field has a default ([`ReceiverConfig::default`]).
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// Accept only this session; `None` adopts the first one heard.
    pub session: Option<SessionId>,
    /// This receiver's id in NAKs and flow reports (choose at random).
    pub receiver_id: u64,
    /// Datagrams held out of order while a hole is recovered (1024).
    pub hold_datagrams: usize,
    /// Largest datagram accepted (65507); longer ones are refused.
    pub max_datagram: usize,
    /// The first NAK for a hole waits a random time in `0..=nak_delay` (1 ms).
    pub nak_delay: Duration,
    /// A hole still missing is NAKed again after this (10 ms) plus a random delay.
    pub nak_retry: Duration,
    /// NAK rounds without progress before the missing run is given up (50).
    pub max_nak_tries: u32,
    /// Datagrams ahead beyond this (65536) are suspect until confirmed.
    pub max_jump: u64,
    /// Consecutive datagrams that confirm a suspect jump (3).
    pub confirm: u32,
    /// How long the stream must show no life at its position before a suspect jump
    /// is believed, however many datagrams agree (500 ms: fifty of the sender's idle
    /// heartbeats), so forged datagrams cannot move a live stream.
    pub jump_quiet: Duration,
    /// Silence after which another session may be adopted (2 s).
    pub session_timeout: Duration,
    /// Flow report period (100 ms).
    pub status_interval: Duration,
    /// Seed of the NAK back-off jitter.
    pub seed: u64,
    /// A stream first heard within its first `join_backlog` datagrams (16), the sender
    /// having dropped none yet, is received from its first message: receivers started
    /// before the sender recover what they missed while joining. Otherwise delivery
    /// starts at the first datagram heard.
    pub join_backlog: u64,
    /// Where to start, as (datagram sequence, message index): the stream position a
    /// router announced in MCAST_ROUTE when this receiver's client connected. The first
    /// session adopted is received from there (what is missing is NAKed; what the
    /// sender no longer holds is reported as a gap), not from the first datagram heard.
    /// `None` (the default): the `join_backlog` rule.
    pub start: Option<(u64, u64)>,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        ReceiverConfig {
            session: None,
            receiver_id: 1,
            hold_datagrams: 1024,
            max_datagram: packet::MAX_DATAGRAM,
            nak_delay: Duration::from_millis(1),
            nak_retry: Duration::from_millis(10),
            max_nak_tries: 50,
            max_jump: 1 << 16,
            confirm: 3,
            jump_quiet: Duration::from_millis(500),
            session_timeout: Duration::from_secs(2),
            status_interval: Duration::from_millis(100),
            seed: 1,
            join_backlog: 16,
            start: None,
        }
    }
}

impl ReceiverConfig {
    /// Checks the bounds; the error names the setting.
    pub fn validate(&self) -> Result<(), Error> {
        if !(2..=1 << 16).contains(&self.hold_datagrams) {
            return Err(Error::Config(format!(
                "hold buffer of {} datagrams is outside 2..=65536",
                self.hold_datagrams
            )));
        }
        if !(packet::MIN_DATAGRAM..=packet::MAX_DATAGRAM).contains(&self.max_datagram) {
            return Err(Error::Config(format!(
                "max datagram {} is outside 256..=65507 bytes",
                self.max_datagram
            )));
        }
        if self.nak_retry.is_zero() || self.status_interval.is_zero() {
            return Err(Error::Config(
                "NAK retry and status interval must be above 0".into(),
            ));
        }
        if self.max_jump < self.hold_datagrams as u64 || self.confirm == 0 {
            return Err(Error::Config(
                "max jump must be at least the hold buffer, confirm at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// What the receiver reports, in stream order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A session was adopted; delivery starts at message `first_msg`.
    Joined { session: SessionId, first_msg: u64 },
    /// The next message, in order. `index` is its position in the sender's stream.
    Message { index: u64, msg: Msg<'a> },
    /// Messages `first_msg .. first_msg + messages` are lost for good (gone from the
    /// sender's buffer, or NAKed in vain): reported before the message after them.
    Gap {
        first_msg: u64,
        messages: u64,
        datagrams: u64,
    },
    /// A hole was filled by a retransmission, `after` it was first seen.
    Recovered { seq: u64, after: Duration },
}

/// Counters, owned by the receiver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    pub datagrams: u64,
    pub delivered: u64,
    pub duplicates: u64,
    /// Malformed datagrams (see [`DecodeError`]).
    pub malformed: u64,
    /// Datagrams of another session or source.
    pub strays: u64,
    /// Datagrams too far ahead, not (yet) confirmed.
    pub implausible: u64,
    /// Datagrams ahead of the hold buffer (asked again later).
    pub overrun: u64,
    pub naks_sent: u64,
    pub recovered: u64,
    pub gaps: u64,
    pub lost_messages: u64,
    /// Datagrams whose message numbering went back (a broken or hostile sender); their
    /// messages were given the next positions instead.
    pub renumbered: u64,
    /// Skips taken back: datagrams given up (below a low mark, or NAKed in vain), and
    /// then, before anything else was delivered, a datagram or heartbeat of the
    /// session showed the sender inside the skipped range (a forged low mark).
    pub false_skips: u64,
}

struct Slot {
    seq: u64,
    bytes: Vec<u8>,
    /// The datagram this slot waits for, while it is missing.
    missing: Missing,
}

#[derive(Debug, Clone, Copy)]
struct Missing {
    seq: u64,
    /// When it was first seen missing (recovery latency).
    since: MonoNanos,
    /// When it was last NAKed (0: never).
    naked: MonoNanos,
}

const NOT_MISSING: Missing = Missing {
    seq: u64::MAX,
    since: MonoNanos(0),
    naked: MonoNanos(0),
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    Joined { session: u32, from: SocketAddr },
}

#[derive(Debug, Clone, Copy)]
struct Cursor {
    offset: usize,
    left: u16,
}

#[derive(Debug, Clone, Copy)]
struct PendingGap {
    first_msg: u64,
    datagrams: u64,
}

struct NakRound {
    /// The first missing datagram was NAKed again (no progress since the last round).
    retried_first: bool,
    /// When the next missing datagram is due for a NAK.
    next_due: Option<MonoNanos>,
}

enum Step {
    Staged(Event<'static>),
    Message {
        slot: usize,
        range: std::ops::Range<usize>,
        index: u64,
    },
}

/// One multicast stream's receiver. Single-threaded; the caller owns IO and time.
pub struct Receiver {
    cfg: ReceiverConfig,
    phase: Phase,
    slots: Vec<Slot>,
    /// The next datagram to deliver.
    expected: u64,
    /// One past the highest datagram known to exist.
    highest: u64,
    next_msg: u64,
    /// Below this, missing datagrams are given up.
    give_up: u64,
    /// Datagrams `from..to` given up with nothing delivered since: a datagram (or a
    /// heartbeat's next) of the session inside that range proves the skip false.
    skipped: Option<(u64, u64)>,
    cursor: Option<Cursor>,
    gap: Option<PendingGap>,
    /// Suspect jump: the next sequence it would need, how many agreed so far, and when
    /// the first of them arrived.
    suspect: Option<(u64, u32, MonoNanos)>,
    /// The sender's latest position heard: (next datagram, next message).
    tail: (u64, u64),
    last_heard: MonoNanos,
    nak_at: Option<MonoNanos>,
    nak_tries: u32,
    status_at: MonoNanos,
    tx: Vec<[u8; HEADER_LEN]>,
    tx_next: usize,
    staged: VecDeque<Event<'static>>,
    rng: ChaCha8Rng,
    stats: ReceiverStats,
    /// `stats.delivered` when the adopted session was joined: flow reports count this
    /// session's messages only, not an earlier sender's.
    delivered_at_join: u64,
}

impl Receiver {
    /// A receiver waiting for its first datagram.
    pub fn new(cfg: ReceiverConfig, now: MonoNanos) -> Result<Receiver, Error> {
        cfg.validate()?;
        let slots = (0..cfg.hold_datagrams)
            .map(|_| Slot {
                seq: EMPTY,
                bytes: Vec::with_capacity(cfg.max_datagram),
                missing: NOT_MISSING,
            })
            .collect();
        Ok(Receiver {
            phase: Phase::Waiting,
            slots,
            expected: 0,
            highest: 0,
            next_msg: 0,
            give_up: 0,
            skipped: None,
            cursor: None,
            gap: None,
            suspect: None,
            tail: (0, 0),
            last_heard: now,
            nak_at: None,
            nak_tries: 0,
            status_at: now.add_duration(cfg.status_interval),
            tx: Vec::with_capacity(MAX_NAK_RUNS + 1),
            tx_next: 0,
            staged: VecDeque::with_capacity(MAX_STAGED),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            stats: ReceiverStats::default(),
            delivered_at_join: 0,
            cfg,
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// The adopted session, once one was heard.
    pub fn session(&self) -> Option<SessionId> {
        match self.phase {
            Phase::Joined { session, .. } => Some(SessionId(session)),
            Phase::Waiting => None,
        }
    }

    /// Datagrams known to exist that are not delivered yet.
    pub fn behind(&self) -> u64 {
        self.highest.saturating_sub(self.expected)
    }

    fn index(&self, seq: u64) -> usize {
        (seq % self.slots.len() as u64) as usize
    }

    /// One datagram from the group (`from` is its source address, where NAKs go).
    /// Refused datagrams are counted; the error says why a malformed one was refused.
    pub fn handle_datagram(
        &mut self,
        now: MonoNanos,
        from: SocketAddr,
        bytes: &[u8],
    ) -> Result<(), DecodeError> {
        if bytes.len() > self.cfg.max_datagram {
            self.stats.malformed += 1;
            return Err(DecodeError::BadLength(bytes.len()));
        }
        let d = match packet::decode(bytes) {
            Ok(d) => d,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        };
        let (seq, first_msg, low, next) = match d {
            Datagram::Data {
                seq,
                first_msg,
                low,
                ..
            } => (Some(seq), first_msg, low, seq + 1),
            Datagram::Heartbeat {
                next,
                next_msg,
                low,
                ..
            } => (None, next_msg, low, next),
            Datagram::Nak { .. } | Datagram::Status { .. } => {
                self.stats.strays += 1;
                return Ok(());
            }
        };
        if !self.admit(now, from, d.session(), seq.unwrap_or(next), first_msg, low) {
            return Ok(());
        }
        self.last_heard = now;
        self.stats.datagrams += 1;
        if next > self.expected.saturating_add(self.cfg.max_jump) {
            if !self.confirmed(now, seq, next) {
                self.stats.implausible += 1;
                return Ok(());
            }
        } else {
            // Life at the stream's position: a suspect jump is not the stream moving on.
            self.suspect = None;
        }
        if let Some((from, to)) = self.skipped {
            // The sender shows itself inside a range given up: the low mark (or the
            // heartbeat) that moved us past it was false. A chain of forged heartbeats,
            // each within `max_jump` of the position the one before gave, had moved a
            // live stream 30 million ahead with 50 datagrams.
            let at = seq.unwrap_or(next);
            if from <= at && at < to && self.expected == to && self.cursor.is_none() {
                self.take_back_skip(from, to);
            }
        }
        self.give_up = self.give_up.max(low);
        self.skip_lost();
        if next > self.highest {
            let hole_end = seq.unwrap_or(next);
            let window_end = self.expected + self.slots.len() as u64;
            for s in self.highest.max(self.expected)..hole_end.min(window_end) {
                let i = self.index(s);
                self.slots[i].missing = Missing {
                    seq: s,
                    since: now,
                    naked: MonoNanos(0),
                };
            }
            if hole_end > self.highest.max(self.expected) {
                self.arm_nak(now);
            }
            self.highest = next;
        }
        if let Some(seq) = seq {
            self.store(now, seq, bytes);
        }
        let tail_msg = match d {
            Datagram::Data { count, .. } => first_msg + u64::from(count),
            _ => first_msg,
        };
        if next >= self.tail.0 {
            self.tail = (next, tail_msg);
        }
        Ok(())
    }

    /// Session and source checks; adopts a session when allowed.
    fn admit(
        &mut self,
        now: MonoNanos,
        from: SocketAddr,
        session: u32,
        seq: u64,
        msg: u64,
        low: u64,
    ) -> bool {
        if let Some(want) = self.cfg.session {
            if want.0 != session {
                self.stats.strays += 1;
                return false;
            }
        }
        match self.phase {
            Phase::Joined {
                session: s,
                from: f,
            } if s == session && f == from => true,
            Phase::Joined { .. }
                if now.saturating_sub(self.last_heard)
                    < self.cfg.session_timeout.as_nanos() as u64 =>
            {
                self.stats.strays += 1;
                false
            }
            _ => {
                let switching = matches!(self.phase, Phase::Joined { .. });
                if let Some((s, m)) = self.cfg.start.take() {
                    self.join(session, from, s, m);
                } else if low == 0 && seq <= self.cfg.join_backlog {
                    self.join(session, from, 0, 0);
                } else if switching {
                    // This receiver was listening while the new session began (the old
                    // one held it): what it did not take of it is loss, said so. It
                    // asks for what the sender still holds (from its low mark, when the
                    // hold window reaches that far), and the messages before the first
                    // one it delivers are reported as a gap from message 0.
                    let first = if seq.saturating_sub(low) < self.slots.len() as u64 {
                        low
                    } else {
                        seq
                    };
                    self.join(session, from, first, 0);
                } else {
                    self.join(session, from, seq, msg);
                }
                true
            }
        }
    }

    fn join(&mut self, session: u32, from: SocketAddr, seq: u64, msg: u64) {
        self.phase = Phase::Joined { session, from };
        self.delivered_at_join = self.stats.delivered;
        self.expected = seq;
        self.highest = seq;
        self.give_up = 0;
        self.next_msg = msg;
        self.cursor = None;
        self.gap = None;
        self.suspect = None;
        self.tail = (seq, msg);
        self.nak_at = None;
        self.nak_tries = 0;
        for s in &mut self.slots {
            s.seq = EMPTY;
            s.missing = NOT_MISSING;
        }
        self.staged.clear();
        self.stage(Event::Joined {
            session: SessionId(session),
            first_msg: msg,
        });
    }

    /// Whether a far jump is confirmed: `confirm` consecutive datagrams agree, and the
    /// stream has shown no life at its position for `jump_quiet` since the first.
    fn confirmed(&mut self, now: MonoNanos, seq: Option<u64>, next: u64) -> bool {
        let Some(seq) = seq else { return false };
        let (n, since) = match self.suspect {
            Some((want, n, since)) if want == seq => (n + 1, since),
            _ => (1, now),
        };
        let quiet = u64::try_from(self.cfg.jump_quiet.as_nanos()).unwrap_or(u64::MAX);
        if n >= self.cfg.confirm && now.saturating_sub(since) >= quiet {
            self.suspect = None;
            return true;
        }
        self.suspect = Some((next, n, since));
        false
    }

    fn store(&mut self, now: MonoNanos, seq: u64, bytes: &[u8]) {
        if seq < self.expected {
            self.stats.duplicates += 1;
            return;
        }
        if seq >= self.expected + self.slots.len() as u64 {
            self.stats.overrun += 1;
            return;
        }
        let i = self.index(seq);
        let slot = &mut self.slots[i];
        if slot.seq == seq {
            self.stats.duplicates += 1;
            return;
        }
        slot.seq = seq;
        slot.bytes.clear();
        slot.bytes.extend_from_slice(bytes);
        if slot.missing.seq == seq {
            let after = Duration::from_nanos(now.saturating_sub(slot.missing.since));
            slot.missing = NOT_MISSING;
            self.stats.recovered += 1;
            self.stage(Event::Recovered { seq, after });
        }
    }

    fn stage(&mut self, ev: Event<'static>) {
        if self.staged.len() < MAX_STAGED {
            self.staged.push_back(ev);
        }
    }

    /// A new hole: NAK it after a random delay (earlier than a pending retry).
    fn arm_nak(&mut self, now: MonoNanos) {
        let at = now.add_nanos(self.jitter());
        self.nak_at = Some(self.nak_at.map_or(at, |t| t.min(at)));
    }

    fn jitter(&mut self) -> u64 {
        let max = self.cfg.nak_delay.as_nanos() as u64;
        if max == 0 {
            0
        } else {
            self.rng.gen_range(0..=max)
        }
    }

    fn report_gap(&mut self, next_first_msg: u64) {
        if let Some(g) = self.gap.take() {
            let messages = next_first_msg.saturating_sub(g.first_msg);
            self.stats.gaps += 1;
            self.stats.lost_messages += messages;
            self.next_msg = self.next_msg.max(next_first_msg);
            self.stage(Event::Gap {
                first_msg: g.first_msg,
                messages,
                datagrams: g.datagrams,
            });
        }
    }

    /// Timers: NAKs for what is still missing, flow reports. Spurious calls are harmless.
    pub fn handle_timer(&mut self, now: MonoNanos) {
        let Phase::Joined { session, .. } = self.phase else {
            // Nothing to report yet; the deadline must still move on (no busy loop).
            if now >= self.status_at {
                self.status_at = now.add_duration(self.cfg.status_interval);
            }
            return;
        };
        if self.tx_next >= self.tx.len() {
            self.tx.clear();
            self.tx_next = 0;
        }
        if self.nak_at.is_some_and(|t| now >= t) {
            let round = self.queue_naks(now, session);
            if round.retried_first {
                self.nak_tries += 1;
                if self.nak_tries > self.cfg.max_nak_tries {
                    // The sender does not answer for the first run: give it up. Not
                    // heard from at all for `session_timeout` (no datagram, no heartbeat;
                    // a live sender heartbeats every 10 ms), the session is over, as a
                    // new one would be adopted now: the rest of the hole it announced
                    // goes too, at once. Worked through a hold window at a time, a
                    // forged heartbeat announcing 60,000 datagrams had a receiver NAK
                    // its source for 32 s (3,068 NAKs for 97 bytes, hostile-input probe).
                    // A shorter silence (a path down for a second) gives up the first
                    // run only, as before: the sender may still hold the rest.
                    let silent = now.saturating_sub(self.last_heard)
                        >= self.cfg.session_timeout.as_nanos() as u64;
                    let end = if silent {
                        self.highest
                    } else {
                        self.first_run_end()
                    };
                    self.give_up = self.give_up.max(end);
                    self.nak_tries = 0;
                }
            }
            self.nak_at = match round.next_due {
                Some(t) => Some(t.add_nanos(self.jitter())),
                // Nothing missing in the window, but more may be beyond it.
                None if self.highest > self.window_end() => {
                    Some(now.add_duration(self.cfg.nak_retry))
                }
                None => None,
            };
        }
        if now >= self.status_at {
            self.status_at = now.add_duration(self.cfg.status_interval);
            self.push_tx(Header {
                kind: Kind::Status,
                flags: 0,
                session,
                count: 0,
                a: self.expected,
                b: self.cfg.receiver_id,
                c: self.stats.delivered - self.delivered_at_join,
            });
        }
    }

    /// Queues a flow report now (a receiver leaving tells the sender where it stopped).
    pub fn handle_close(&mut self, now: MonoNanos) {
        self.status_at = now;
        self.nak_at = None;
        self.handle_timer(now);
    }

    fn window_end(&self) -> u64 {
        self.highest
            .min(self.expected + self.slots.len() as u64)
            .max(self.expected)
    }

    fn held(&self, seq: u64) -> bool {
        self.slots[self.index(seq)].seq == seq
    }

    fn first_run_end(&self) -> u64 {
        let mut s = self.expected;
        while s < self.window_end() && !self.held(s) {
            s += 1;
        }
        s
    }

    /// Queues one NAK per run of missing datagrams that are due (never NAKed, or NAKed
    /// `nak_retry` ago), at most 16 runs per round.
    fn queue_naks(&mut self, now: MonoNanos, session: u32) -> NakRound {
        let retry = self.cfg.nak_retry.as_nanos() as u64;
        let end = self.window_end();
        let mut round = NakRound {
            retried_first: false,
            next_due: None,
        };
        let mut runs = 0;
        let mut run_from = None;
        let mut s = self.expected;
        while s <= end {
            let i = self.index(s);
            let due = s < end && !self.held(s) && runs < MAX_NAK_RUNS && {
                let m = &mut self.slots[i].missing;
                if m.seq != s {
                    // Missing since a jump or a skip: first seen now.
                    *m = Missing {
                        seq: s,
                        since: now,
                        naked: MonoNanos(0),
                    };
                }
                let due = m.naked.0 == 0 || now.saturating_sub(m.naked) >= retry;
                let again = if due { now } else { m.naked };
                if due {
                    round.retried_first |= s == self.expected && m.naked.0 != 0;
                    m.naked = now;
                }
                let at = again.add_nanos(retry);
                round.next_due = Some(round.next_due.map_or(at, |t: MonoNanos| t.min(at)));
                due
            };
            match (due, run_from) {
                (true, None) => run_from = Some(s),
                (true, Some(from)) if s - from >= u64::from(u16::MAX) => {
                    self.push_nak(session, from, s);
                    runs += 1;
                    run_from = Some(s);
                }
                (false, Some(from)) => {
                    self.push_nak(session, from, s);
                    runs += 1;
                    run_from = None;
                }
                _ => {}
            }
            s += 1;
        }
        round
    }

    fn push_nak(&mut self, session: u32, from: u64, to: u64) {
        self.push_tx(Header {
            kind: Kind::Nak,
            flags: 0,
            session,
            count: (to - from) as u16,
            a: from,
            b: self.cfg.receiver_id,
            c: 0,
        });
        self.stats.naks_sent += 1;
    }

    fn push_tx(&mut self, h: Header) {
        if self.tx.len() < self.tx.capacity() {
            let mut b = [0u8; HEADER_LEN];
            packet::write_header(&mut b, h);
            self.tx.push(b);
        }
    }

    /// When [`Receiver::handle_timer`] wants to be called.
    pub fn poll_timeout(&self) -> MonoNanos {
        match self.nak_at {
            Some(t) => t.min(self.status_at),
            None => self.status_at,
        }
    }

    /// The next datagram to send, unicast to the sender: `(address, bytes)`.
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, &[u8])> {
        let Phase::Joined { from, .. } = self.phase else {
            return None;
        };
        let b = self.tx.get(self.tx_next)?;
        self.tx_next += 1;
        Some((from, &b[..]))
    }

    /// The next event: messages in order, gaps where loss was given up.
    pub fn poll_event(&mut self) -> Option<Event<'_>> {
        match self.advance()? {
            Step::Staged(ev) => Some(ev),
            Step::Message { slot, range, index } => {
                let bytes = &self.slots[slot].bytes[range];
                match frame::decode(bytes, packet::MAX_DATAGRAM as u32) {
                    Ok(Some((frame::Frame::Publish(msg), _))) => {
                        Some(Event::Message { index, msg })
                    }
                    // Checked when the datagram arrived: cannot happen.
                    _ => None,
                }
            }
        }
    }

    /// Moves delivery on by one step; the borrow of the message is taken by the caller.
    fn advance(&mut self) -> Option<Step> {
        loop {
            if let Some(ev) = self.staged.pop_front() {
                return Some(Step::Staged(ev));
            }
            if let Some(c) = self.cursor {
                let slot = self.index(self.expected);
                let len = match frame::frame_len(
                    &self.slots[slot].bytes[c.offset..],
                    packet::MAX_DATAGRAM as u32,
                ) {
                    Ok(Some(n)) => n,
                    // Checked when the datagram arrived: cannot happen.
                    _ => {
                        self.finish_slot();
                        continue;
                    }
                };
                if c.left <= 1 {
                    self.finish_slot();
                } else {
                    self.cursor = Some(Cursor {
                        offset: c.offset + len,
                        left: c.left - 1,
                    });
                }
                let index = self.next_msg;
                self.next_msg += 1;
                self.stats.delivered += 1;
                return Some(Step::Message {
                    slot,
                    range: c.offset..c.offset + len,
                    index,
                });
            }
            if self.expected >= self.highest {
                if self.gap.is_some() && self.tail.0 == self.expected {
                    // Lost up to the tail: the sender's position says how many messages.
                    self.report_gap(self.tail.1);
                    continue;
                }
                return None;
            }
            if self.held(self.expected) {
                let i = self.index(self.expected);
                let Ok(Datagram::Data {
                    first_msg, count, ..
                }) = packet::decode(&self.slots[i].bytes)
                else {
                    self.finish_slot();
                    continue;
                };
                self.report_gap(first_msg);
                if first_msg > self.next_msg {
                    // Messages skipped between consecutive datagrams: lost, and said so.
                    self.gap = Some(PendingGap {
                        first_msg: self.next_msg,
                        datagrams: 0,
                    });
                    self.report_gap(first_msg);
                } else if first_msg < self.next_msg {
                    // A sender going back in its own numbering: positions never do.
                    self.stats.renumbered += 1;
                }
                // Delivery goes on from here: a skip before it stays.
                self.skipped = None;
                self.cursor = Some(Cursor {
                    offset: HEADER_LEN,
                    left: count,
                });
                continue;
            }
            if self.expected < self.give_up {
                self.skip_lost();
                continue;
            }
            return None;
        }
    }

    /// Gives up the missing datagrams below `give_up` up to the first one held: at most
    /// one scan of the hold window, however far `give_up` is.
    fn skip_lost(&mut self) {
        if self.cursor.is_some() || self.expected >= self.give_up {
            return;
        }
        let limit = self.give_up.min(self.expected + self.slots.len() as u64);
        let mut s = self.expected;
        while s < limit && !self.held(s) {
            s += 1;
        }
        if s == limit {
            // Nothing is held in the window, and nothing beyond it.
            s = self.give_up;
        }
        if s == self.expected {
            // The datagram at the position is held: nothing to give up (an empty gap
            // was reported here before, "0 messages lost").
            return;
        }
        let first_msg = self.next_msg;
        let g = self.gap.get_or_insert(PendingGap {
            first_msg,
            datagrams: 0,
        });
        g.datagrams += s - self.expected;
        let from = match self.skipped {
            Some((from, to)) if to == self.expected => from,
            _ => self.expected,
        };
        self.skipped = Some((from, s));
        self.expected = s;
        self.highest = self.highest.max(s);
        self.nak_tries = 0;
    }

    /// Undoes the skip of `from..to` (see [`ReceiverStats::false_skips`]): the position
    /// goes back to `from`, what the skip added to the pending gap is taken off, and
    /// the sender's position is forgotten (the datagram at hand sets it again).
    #[cold]
    fn take_back_skip(&mut self, from: u64, to: u64) {
        self.skipped = None;
        self.stats.false_skips += 1;
        if let Some(g) = &mut self.gap {
            g.datagrams = g.datagrams.saturating_sub(to - from);
            if g.datagrams == 0 {
                self.gap = None;
            }
        }
        self.expected = from;
        self.highest = from;
        self.give_up = from;
        self.tail = (from, self.next_msg);
        self.nak_tries = 0;
        // Holes the false position announced are not holes: the datagram at hand
        // marks the real ones (one pass over the hold window, as marking them took).
        for slot in &mut self.slots {
            if slot.missing.seq >= from {
                slot.missing = NOT_MISSING;
            }
        }
    }

    fn finish_slot(&mut self) {
        let i = self.index(self.expected);
        self.slots[i].seq = EMPTY;
        self.cursor = None;
        self.expected += 1;
        self.nak_tries = 0;
    }
}
