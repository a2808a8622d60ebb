//! The feed-handler core: MoldUDP64 packets and time in, book updates and normalized
//! market-data updates out. No sockets, no clock, no threads (the house "sans-IO"
//! rule): the driver owns the multicast socket, the re-request socket, the router
//! client and the clock.
//!
//! # Driving it
//!
//! ```text
//! loop {
//!     now = clock (CLOCK_MONOTONIC ns, once per loop turn)
//!     for each packet read (multicast feed or retransmission answer):
//!         core.handle_datagram(now, &packet, &mut sink)   // sink publishes updates
//!     if now >= core.poll_timeout():  core.handle_timeout(now, &mut sink)
//!     while let Some(req) = core.poll_transmit():  send req.to_bytes() to the re-request server
//!     once a second: read core.counters()
//! }
//! ```
//!
//! The vocabulary is quinn's: `handle_*` for input (datagrams, timeouts), `poll_*` for
//! output (`poll_transmit`: the next re-request to send; `poll_timeout`: when to call
//! `handle_timeout`). Updates are the one exception: they go to a [`Sink`] during
//! `handle_*` instead of being drained by a `poll_event`. One datagram yields up to
//! ~90 updates; a `poll_event` queue would have to copy each encoded update into a
//! buffer sized for the worst packet and hand out borrows one at a time, whereas the
//! sink borrows the one reused encode buffer for the duration of the call: no copy, no
//! allocation, and the driver's sink writes straight into the router connection.
//!
//! # Sequencing (one MoldUDP64 session)
//!
//! The core keeps the next expected sequence number (`first_sequence`, 1 by default).
//!
//! - A packet **in order** (its first sequence ≤ expected < its end) is decoded and
//!   applied; messages before `expected` (an overlap) are skipped as duplicates. Then any
//!   held packets that have become in order are applied too.
//! - A packet **ahead** of expected is a gap: the packet is held (copied into a recycled
//!   buffer, at most `max_held_packets` and `max_held_bytes`) and a [`RetransmitRequest`] for the first
//!   missing messages (at most `max_request_count`) is queued for
//!   [`FeedHandler::poll_transmit`]. Heartbeats (count 0) and End of Session (count
//!   0xFFFF) announce the next sequence number, so they reveal gaps too.
//! - When retransmitted messages fill part of the gap and some are still missing, the
//!   next request goes out at once (the driver hands the re-request server's packets
//!   to [`FeedHandler::handle_retransmission`]). A line's packets that fill a gap in
//!   order inside the range already asked for send nothing new: the gap's timeouts run
//!   on (an end announced ahead of a live stream drew a re-request per live packet). If nothing arrives for `retransmit_timeout`, the
//!   request is repeated; after `max_retransmit_tries` requests without progress the
//!   missing messages up to the next data held (or announced) are declared **lost**:
//!   counted in [`Counters::lost`], skipped, and the session goes on. After a gap that
//!   got no message back at all, the next gaps get one request each (the server looks
//!   silent: a replay has none), each waiting `retransmit_timeout` from when it was
//!   seen (its first held packet's arrival), not from when the gap before it was
//!   given up, until a retransmission arrives again: gaps that overlap in time expire
//!   together, so the feed runs at most about `retransmit_timeout` behind instead of
//!   filling its hold. When a packet
//!   arrives ahead with `max_held_packets` already held, or too large for the
//!   `max_held_bytes` left, the oldest gaps are given up at once to make room ([`Counters::overflow`]), so the loss stays what was missing; but while a line
//!   has brought packets in order since the oldest held packet arrived (the stream is
//!   alive below the hold, so what is held ahead is the suspect part), the packet
//!   furthest ahead (the highest held, or the new one) makes room instead. Orders they would
//!   have added are then unknown to the book and later references to them are counted
//!   ([`crate::book::OrderBooks::unknown_refs`]).
//! - A packet entirely **behind** expected is a duplicate: counted and skipped.
//! - **A/B lines**: a driver may feed the packets of two redundant lines of one session
//!   into one core. The first copy of a packet wins; the second is a duplicate. With
//!   [`FeedConfig::line_wait`] set, a new gap waits that long for the other line before
//!   its first re-request: a packet lost on one line only is filled from the other and
//!   never re-requested ([`Counters::line_filled`]); one lost on both is re-requested as
//!   above.
//!
//! # Choosing the session, believing a jump (stray and spoofed datagrams)
//!
//! - With [`FeedConfig::session`] set, only that session is followed; valid packets of
//!   any other are counted ([`Counters::foreign_session`]) and ignored.
//! - Without it, nothing is applied until one session *and sequence neighbourhood* has
//!   sent `confirm_packets` (default 3) packets: each valid packet joins the candidate
//!   of its session whose sequence range it falls within `max_jump` of, or starts a new
//!   one (at most [`MAX_CANDIDATES`]; a new one evicts the candidate with the fewest
//!   packets, oldest first). The first candidate to reach `confirm_packets` is adopted
//!   and its kept packets are applied in arrival order; the other candidates' packets
//!   are counted (`foreign_session`, or `suspect_jumps` for the adopted session's). One
//!   stray datagram arriving first therefore costs nothing; an attacker who can send
//!   `confirm_packets` datagrams before a quiet real session can still win, which is
//!   why production configurations name the session.
//! - A packet of the followed session whose first sequence number is more than
//!   `max_jump` (default 100,000) beyond the highest known (`expected` or announced,
//!   the latter counting at most `max_jump` beyond `expected`) is
//!   *suspect* ([`Counters::suspect_jumps`]): kept aside (bounded), neither applied nor
//!   announcing a gap, so it cannot start a re-request storm or make the real messages
//!   after it look like duplicates. If `confirm_packets` suspect packets agree (each
//!   within `max_jump` of the others, each bringing messages beyond the last: copies
//!   and heartbeats confirm nothing) and no packet has shown life at the old position
//!   for [`FeedConfig::jump_quiet`] (2 s, longer than a server's heartbeat interval)
//!   since the first of them, the jump is real (the exchange moved on): it is followed
//!   from the most recent suspects ([`Counters::accepted_jumps`]) and the messages
//!   skipped are counted lost, never re-requested. Any packet at the old position
//!   discards the suspects, so a live stream cannot be moved by forged packets
//!   however many arrive at once. So a gap, and hence what is re-requested, never
//!   spans more than about 2 x `max_jump` messages.
//! - An End of Session is believed ([`FeedHandler::session_ended`]) once the stream
//!   has reached the sequence number it announced and, for `jump_quiet`, no packet
//!   went past it; a stream that goes on past it for `jump_quiet` proves it false
//!   ([`Counters::false_session_ends`]).
//! - A gap given up whose end only an announcement gave (nothing held there) is taken
//!   back ([`Counters::false_ends`]) if, before anything else is applied, a packet
//!   brings messages of the skipped range or a heartbeat says the stream is in it:
//!   a forged (or stale) announcement cannot wedge a live stream whose real packets
//!   then look like duplicates.
//!
//! # Bad input
//!
//! Every packet is checked whole before any of it is applied (header, block lengths
//! against the packet end, block count against the header). A packet that fails is
//! counted by kind ([`Counters`]), dropped whole, and treated like a lost packet (the
//! next good packet reveals the gap and recovery re-requests it). Inside a good packet,
//! a message of an unknown ITCH type or of the wrong length for its type is counted and
//! skipped but its sequence number is consumed. Nothing here panics on any input.
//!
//! # Output
//!
//! For each applied ITCH message the book of its stock locate is updated and updates
//! (see [`crate::update`]) go to the [`Sink`] with topics precomputed at Stock
//! Directory (`R`) time, so steady state allocates nothing:
//!
//! - `md/<venue>/<SYMBOL>/trade` for every execution (`E`, `C`) and non-displayed
//!   trade (`P`);
//! - `md/<venue>/<SYMBOL>/quote` when the top of book changed (the best level being
//!   touched is not enough: a replace at the same price and size changes nothing);
//! - `md/<venue>/<SYMBOL>/depth` when `depth_levels` > 0 and one of the best
//!   `depth_levels` levels of a side changed.
//!
//! A symbol whose Stock Directory message was never seen (lost, or a locate the
//! directory did not announce) still has its book maintained, but nothing is published
//! for it ([`Counters::unpublished`]).

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use tickwire_itch::{self as itch, DecodeError, Message, MoldError, MoldPacket, PacketKind};
pub use tickwire_itch::{RetransmitRequest, Session};

use tickwire_rt::MonoNanos;
use tickwire_wire::topic::Topic;

use crate::book::{Change, OrderBooks, Side};
use crate::update::{self, trade_flags, Header, Quote, Trade, MAX_DEPTH_LEVELS};

/// Receives the normalized updates: a topic (checked against the topic rules when the
/// symbol was registered) and a payload (borrowed, valid for the call only).
pub trait Sink {
    /// Publishes one update.
    fn publish(&mut self, topic: &Topic, payload: &[u8]);
}

impl<F: FnMut(&str, &[u8])> Sink for F {
    #[inline]
    fn publish(&mut self, topic: &Topic, payload: &[u8]) {
        self(topic.as_str(), payload)
    }
}

/// Settings of a [`FeedHandler`]; every field has a sensible [`Default`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedConfig {
    /// The MoldUDP64 session to follow. Packets of any other session are counted
    /// ([`Counters::foreign_session`]) and ignored. `None` adopts the first session
    /// that sends `confirm_packets` packets with plausible sequence numbers (see
    /// "Choosing the session" in the module docs); set it in production, where a
    /// spoofer could out-send a real session that is quiet.
    pub session: Option<Session>,
    /// Sequence number of the first message expected (1: join from the start of the
    /// session, so everything before the first packet seen is re-requested).
    pub first_sequence: u64,
    /// Venue level of the topics: `md/<venue>/<SYMBOL>/<kind>` (default `NASDAQ`).
    pub venue: String,
    /// Levels per side in depth updates; 0 (the default) publishes no depth updates.
    /// At most [`MAX_DEPTH_LEVELS`].
    pub depth_levels: usize,
    /// How long to wait for an answer to a re-request before repeating it (default
    /// 50 ms).
    pub retransmit_timeout: Duration,
    /// Re-requests sent for one missing range before it is declared lost (default 3;
    /// one while the server looks silent: the last gap given up got nothing back).
    pub max_retransmit_tries: u32,
    /// Most messages asked for in one re-request (default 1000; below 0xFFFF).
    pub max_request_count: u16,
    /// Most packets held while waiting for a gap to fill (default 8192). When a packet
    /// arrives ahead with all of them in use, the oldest gap is given up at once (its
    /// messages counted lost, [`Counters::overflow`] counts the event) and the held
    /// packets it was holding back are applied, so the packet is kept: with re-requests
    /// unanswered, what is lost stays what was missing.
    pub max_held_packets: usize,
    /// Most bytes of packets held while waiting for a gap to fill (default 64 MiB),
    /// enforced as `max_held_packets` is: a packet that would take the hold past it
    /// gives up the oldest gaps until it fits ([`Counters::overflow`] counts each). The
    /// count alone let 8192 datagrams of up to 64 KiB hold about 0.5 GiB (measured: a
    /// feed went from 62 to 542 MB with 60 KB packets ahead of a gap).
    pub max_held_bytes: usize,
    /// How far ahead, in messages, a packet's first sequence number may be of the
    /// highest one known (expected or announced) and still be believed (default
    /// 100,000). A packet farther ahead is suspect ([`Counters::suspect_jumps`]): it is
    /// neither applied nor announces a gap, until `confirm_packets` suspect packets
    /// agree. This also bounds the range a gap can ask to re-request.
    pub max_jump: u64,
    /// Packets that must agree before the core believes something new: a session
    /// (when `session` is `None`) or a jump of more than `max_jump` (default 3,
    /// at most [`MAX_CONFIRM_PACKETS`]; 1 believes the first packet, the behaviour
    /// before these checks existed).
    pub confirm_packets: usize,
    /// How long the followed stream must show no life at its position before a jump
    /// is believed, however many packets agree on it (default 2 s: longer than the
    /// 1-s heartbeat of a MoldUDP64 server, so a live stream, even an idle one,
    /// always contradicts a forged jump; a burst of forged copies between two real
    /// packets had wedged a live feed, or moved it to the top of the sequence space
    /// for good). An End of Session is believed after the same quiet time
    /// ([`FeedHandler::session_ended`]).
    pub jump_quiet: Duration,
    /// Live orders the order map holds before it has to grow (default 1 Mi).
    pub order_capacity: usize,
    /// Live orders held at most (default [`DEFAULT_MAX_ORDERS`], at least 1): an add
    /// past it is refused and counted
    /// ([`crate::book::OrderBooks::refused_full`]), so a feed that adds orders and
    /// never deletes them cannot grow the process without end.
    pub max_orders: usize,
    /// Price levels per book side reserved at Stock Directory time (default 64).
    pub levels_per_side: usize,
    /// A/B line arbitration: how long a gap waits for the other line's copy of the
    /// missing packets before the first re-request goes out (default 0: at once, for a
    /// single line). With two lines fed into one core, the first copy of each packet
    /// wins and the second is a duplicate; a packet lost on one line only is filled from
    /// the other within this wait and never re-requested ([`Counters::line_filled`]).
    pub line_wait: Duration,
}

impl Default for FeedConfig {
    fn default() -> Self {
        FeedConfig {
            session: None,
            first_sequence: 1,
            venue: "NASDAQ".to_string(),
            depth_levels: 0,
            retransmit_timeout: Duration::from_millis(50),
            max_retransmit_tries: 3,
            max_request_count: 1000,
            max_held_packets: 8192,
            max_held_bytes: 64 << 20,
            max_jump: 100_000,
            confirm_packets: 3,
            jump_quiet: Duration::from_secs(2),
            order_capacity: 1 << 20,
            max_orders: DEFAULT_MAX_ORDERS,
            levels_per_side: 64,
            line_wait: Duration::ZERO,
        }
    }
}

/// Default [`FeedConfig::max_orders`]: 32 Mi live orders, several times what a whole
/// US equities feed holds at its busiest, and about 3.5 GB of books (a hostile-input
/// probe measured 333 MB for 3 M live orders).
pub const DEFAULT_MAX_ORDERS: usize = 32 << 20;

/// Largest [`FeedConfig::confirm_packets`]: packets kept while a session or a jump is
/// unconfirmed are bounded by it (times [`MAX_CANDIDATES`] before a session is adopted).
pub const MAX_CONFIRM_PACKETS: usize = 16;

/// Smallest [`FeedConfig::max_held_bytes`]: any UDP datagram fits.
pub const MIN_MAX_HELD_BYTES: usize = 64 << 10;

/// Largest emptied packet buffer kept for reuse (a MoldUDP64 packet fits an Ethernet
/// frame; larger buffers are freed when emptied).
const SPARE_MAX_CAPACITY: usize = 2048;

/// Candidate sessions (or sequence neighbourhoods) tracked at once before one is
/// adopted; a new one evicts the candidate with the fewest packets.
pub const MAX_CANDIDATES: usize = 8;

/// A [`FeedConfig`] that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `depth_levels` exceeds [`MAX_DEPTH_LEVELS`].
    #[error("depth_levels = {0} exceeds the maximum of {MAX_DEPTH_LEVELS}")]
    DepthLevels(usize),
    /// `max_request_count` must be 1..=0xFFFE.
    #[error("max_request_count must be between 1 and 65534")]
    RequestCount,
    /// `max_retransmit_tries` must be at least 1.
    #[error("max_retransmit_tries must be at least 1")]
    RetransmitTries,
    /// `confirm_packets` must be 1..=[`MAX_CONFIRM_PACKETS`].
    #[error("confirm_packets must be between 1 and {MAX_CONFIRM_PACKETS}")]
    ConfirmPackets,
    /// `max_jump` must be at least 1.
    #[error("max_jump must be at least 1")]
    MaxJump,
    /// `max_held_bytes` must hold the largest datagram ([`MIN_MAX_HELD_BYTES`]).
    #[error("max_held_bytes must be at least {MIN_MAX_HELD_BYTES} (the largest datagram)")]
    MaxHeldBytes,
    /// `venue` is not a single valid topic level.
    #[error("venue {0:?} is not a valid topic level")]
    Venue(String),
    /// `max_orders` must be at least 1.
    #[error("max_orders must be at least 1")]
    MaxOrders,
}

impl FeedConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.depth_levels > MAX_DEPTH_LEVELS {
            return Err(ConfigError::DepthLevels(self.depth_levels));
        }
        if self.max_request_count == 0 || self.max_request_count == u16::MAX {
            return Err(ConfigError::RequestCount);
        }
        if self.max_retransmit_tries == 0 {
            return Err(ConfigError::RetransmitTries);
        }
        if !(1..=MAX_CONFIRM_PACKETS).contains(&self.confirm_packets) {
            return Err(ConfigError::ConfirmPackets);
        }
        if self.max_jump == 0 {
            return Err(ConfigError::MaxJump);
        }
        if self.max_held_bytes < MIN_MAX_HELD_BYTES {
            return Err(ConfigError::MaxHeldBytes);
        }
        if self.max_orders == 0 {
            return Err(ConfigError::MaxOrders);
        }
        let probe = format!("md/{}/X", self.venue);
        let one_level = !self.venue.contains(['/', '*', '>']);
        if !one_level || tickwire_wire::topic::validate_topic(probe.as_bytes()).is_err() {
            return Err(ConfigError::Venue(self.venue.clone()));
        }
        Ok(())
    }
}

/// Counters, plain integers owned by the core; the driver reads them (e.g. once a
/// second). `malformed` is the sum of the per-kind bad-input counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Counters {
    /// Packets handed to the core (all of them, good or bad).
    pub packets: u64,
    /// ITCH messages applied in sequence (including skipped bad messages).
    pub messages: u64,
    /// Gaps detected (a missing range opened while none was open).
    pub gaps: u64,
    /// Messages applied that had been missing when a gap was detected (filled by
    /// retransmission or late, reordered packets).
    pub recovered: u64,
    /// Messages declared lost after the re-requests for them went unanswered.
    pub lost: u64,
    /// Messages received again after they had been applied, and skipped.
    pub duplicates: u64,
    /// Bad input of any kind (sum of the four counters below).
    pub malformed: u64,
    /// Packets shorter than the MoldUDP64 header.
    pub truncated_packets: u64,
    /// Packets whose blocks run past the end, fall short of or exceed the count, or
    /// whose sequence numbers would pass 2^64 - 1.
    pub bad_blocks: u64,
    /// Messages of an unknown ITCH type.
    pub unknown_types: u64,
    /// Messages of a known type with the wrong length or an invalid field.
    pub bad_messages: u64,
    /// Normalized updates handed to the sink.
    pub published: u64,
    /// Updates not published because their symbol had no Stock Directory message.
    pub unpublished: u64,
    /// Heartbeat packets.
    pub heartbeats: u64,
    /// Re-requests queued.
    pub requests: u64,
    /// Gaps closed before their first re-request: the other line (A/B arbitration,
    /// [`FeedConfig::line_wait`]) or a reordered packet brought what was missing.
    pub line_filled: u64,
    /// Times a packet arrived ahead with `max_held_packets` already held, or too large
    /// for the `max_held_bytes` left: each time the oldest gap was given up before its
    /// re-requests ran out (its messages are in `lost`) to make room, or, while a line
    /// still brought packets in order below the hold, the packet furthest ahead was
    /// dropped.
    pub overflow: u64,
    /// Valid packets of a session other than the one followed (stray or spoofed
    /// traffic), ignored; before a session is adopted, the packets of the candidates
    /// that were not (also those evicted when more than [`MAX_CANDIDATES`] competed).
    pub foreign_session: u64,
    /// Packets of the followed session whose first sequence number was more than
    /// `max_jump` ahead of the highest one known when they arrived.
    pub suspect_jumps: u64,
    /// Jumps of more than `max_jump` that `confirm_packets` packets confirmed and the
    /// core followed; the messages skipped are counted in `lost`, not re-requested.
    pub accepted_jumps: u64,
    /// Gaps given up whose end only an announcement gave (a heartbeat, an End of
    /// Session or a packet's end, nothing held beyond), taken back when a packet then
    /// brought messages of the skipped range before anything else was applied: the
    /// announcement was false (spoofed, or stale), and the stream is followed from
    /// where it really is.
    pub false_ends: u64,
    /// Messages of `lost` that those skips had counted, taken back with them: the
    /// messages really lost are [`Counters::net_lost`]. (`lost` itself only grows: it
    /// is a counter to monitoring.)
    pub taken_back: u64,
    /// End of Session packets the stream went on past (messages at or after the
    /// sequence number they announced, or heartbeats) for `jump_quiet`: not this
    /// session's end (forged, or stale), so they were forgotten.
    pub false_session_ends: u64,
}

impl Counters {
    /// Messages lost for good: `lost` less what false announcements had made it count
    /// and was taken back ([`Counters::taken_back`]).
    pub fn net_lost(&self) -> u64 {
        self.lost.saturating_sub(self.taken_back)
    }
}

/// A packet that arrived ahead of the expected sequence number.
struct Held {
    seq: u64,
    next: u64,
    received: MonoNanos,
    bytes: Vec<u8>,
}

/// An open gap: the first missing sequence number and the re-request state.
#[derive(Debug, Clone, Copy)]
struct Gap {
    first: u64,
    tries: u32,
    deadline: MonoNanos,
    /// `Counters::recovered` when it opened: unchanged at its end means no answer came.
    recovered: u64,
}

/// An End of Session: what it announced, and what the stream has done since.
#[derive(Debug, Clone, Copy)]
struct End {
    /// The sequence number it announced (no message at or after it exists).
    seq: u64,
    /// When the quiet it needs began: its arrival, or the last packet that went past it
    /// (or the gap given up that reached it on an announcement alone).
    since: MonoNanos,
    /// When a packet first went past it, if one did.
    contradicted: Option<MonoNanos>,
}

/// Packets that agree on a session and a sequence neighbourhood, kept until
/// `confirm_packets` of them make them believable.
struct Candidate {
    session: Session,
    /// Lowest first sequence number and highest end of the packets.
    first: u64,
    next: u64,
    /// In arrival order; at most `confirm_packets`.
    packets: Vec<Held>,
    /// `Counters::packets` when the candidate appeared (eviction: oldest first).
    born: u64,
    /// When its first packet arrived (a jump is believed only `jump_quiet` later).
    since: MonoNanos,
}

impl Candidate {
    /// Whether a packet spanning `seq..next` of `session` is near this candidate.
    fn near(&self, session: Session, seq: u64, next: u64, max_jump: u64) -> bool {
        self.session == session
            && seq <= self.next.saturating_add(max_jump)
            && next.saturating_add(max_jump) >= self.first
    }
}

/// Topics and symbol of one stock locate, built once at Stock Directory time.
struct Symbol {
    symbol: [u8; 8],
    trade: Topic,
    quote: Topic,
    depth: Topic,
    /// The last quote published (an unchanged top is not published again).
    last_quote: Quote,
}

/// The feed-handler core for one MoldUDP64 session (see the module docs).
pub struct FeedHandler {
    cfg: FeedConfig,
    session: Option<Session>,
    /// The session of the last packet counted in `foreign_session` (for the report).
    last_foreign: Option<Session>,
    expected: u64,
    /// Highest "next sequence" any packet announced.
    known_end: u64,
    /// What the last gaps given up skipped (`from..to`) when nothing held stood at
    /// their end (only an announcement put it there), until anything is applied: a
    /// packet inside it meanwhile proves the announcement false.
    skipped: Option<(u64, u64)>,
    /// End (exclusive) of the ranges that were missing when gaps were detected.
    missing_end: u64,
    /// Ordered by sequence number. A deque: held packets leave from the front, and
    /// with a full hold (8192) `Vec::remove(0)` moved the whole hold for every packet
    /// released, which made a feed running behind a silent re-request server fall
    /// further behind until its socket overflowed.
    held: VecDeque<Held>,
    /// Capacity of the buffers in `held` (bounded by `max_held_bytes`).
    held_bytes: usize,
    /// Emptied buffers for the next copies; only buffers of at most
    /// [`SPARE_MAX_CAPACITY`] are kept, so that buffers grown for large packets are
    /// given back rather than kept for ever (up to `max_held_packets` of them).
    spare: Vec<Vec<u8>>,
    /// Before a session is adopted: the competing candidates (at most
    /// [`MAX_CANDIDATES`]).
    candidates: Vec<Candidate>,
    /// After: suspect packets far ahead, waiting to be confirmed or contradicted.
    jump: Option<Candidate>,
    gap: Option<Gap>,
    /// The last gap given up by its timeouts got no message back: the re-request
    /// server looks silent (a replay has none), so the next gaps get one try, not
    /// `max_retransmit_tries`, until a retransmitted message arrives again.
    unanswered: bool,
    request: Option<RetransmitRequest>,
    /// The range the last re-request asked for (`sequence..sequence + count`).
    requested: Option<(u64, u64)>,
    /// The packet being handled came from the re-request server
    /// ([`FeedHandler::handle_retransmission`]), not from a line.
    answer: bool,
    /// When a line last brought a packet in order (applied at once, not held).
    live_in_order_at: Option<MonoNanos>,
    /// When a line last brought a packet that continued the hold's top (held, starting
    /// where the highest held packet ends): the stream arriving above the hold.
    run_extended_at: Option<MonoNanos>,
    /// Line packets applied in order since the hold last went from empty to not.
    in_order_since_hold: u32,
    /// The last End of Session (see [`FeedHandler::session_ended`]).
    end: Option<End>,
    /// Highest "next sequence" of a packet of messages held or applied (`known_end`
    /// less what only announcements said).
    data_end: u64,
    ended: bool,
    books: OrderBooks,
    symbols: Vec<Option<Symbol>>,
    out: Vec<u8>,
    counters: Counters,
}

impl fmt::Debug for FeedHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedHandler")
            .field("session", &self.session)
            .field("expected", &self.expected)
            .field("held", &self.held.len())
            .field("gap", &self.gap)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl FeedHandler {
    /// A core with the given settings.
    pub fn new(cfg: FeedConfig) -> Result<FeedHandler, ConfigError> {
        cfg.validate()?;
        let mut books = OrderBooks::with_capacity(cfg.order_capacity, cfg.levels_per_side);
        books.set_max_orders(cfg.max_orders);
        Ok(FeedHandler {
            session: cfg.session,
            last_foreign: None,
            expected: cfg.first_sequence,
            known_end: cfg.first_sequence,
            skipped: None,
            missing_end: 0,
            held: VecDeque::new(),
            held_bytes: 0,
            spare: Vec::new(),
            candidates: Vec::new(),
            jump: None,
            gap: None,
            unanswered: false,
            request: None,
            requested: None,
            answer: false,
            live_in_order_at: None,
            run_extended_at: None,
            in_order_since_hold: 0,
            end: None,
            data_end: cfg.first_sequence,
            ended: false,
            books,
            symbols: Vec::new(),
            out: Vec::with_capacity(
                update::DEPTH_FIXED_LEN + 2 * MAX_DEPTH_LEVELS * update::LEVEL_LEN,
            ),
            counters: Counters::default(),
            cfg,
        })
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The books.
    pub fn books(&self) -> &OrderBooks {
        &self.books
    }

    /// The session being followed (once known).
    pub fn session(&self) -> Option<Session> {
        self.session
    }

    /// The session of the last packet ignored as another session's (`foreign_session`).
    pub fn last_foreign_session(&self) -> Option<Session> {
        self.last_foreign
    }

    /// The next sequence number expected.
    pub fn expected_sequence(&self) -> u64 {
        self.expected
    }

    /// Whether the session has ended: an End of Session packet arrived, every message
    /// before the sequence number it announced was applied (or given up), and for
    /// [`FeedConfig::jump_quiet`] no packet went past it (messages at or after that
    /// number, or a heartbeat: a server sends none after its end). Believed at once,
    /// one forged End of Session at the next sequence number ended a live feed with
    /// status 0 (hostile-input pass). A packet past the end takes an ended session back
    /// and starts the quiet again; a stream that goes on past it for `jump_quiet`
    /// proves it false, and it is forgotten ([`Counters::false_session_ends`]). A later
    /// End of Session replaces it (the latest wins: an earlier end forgets what only
    /// the other announced). Not forgotten at the first packet past it: one forged
    /// packet after a real end would have kept the feed running for good.
    pub fn session_ended(&self) -> bool {
        self.ended
    }

    /// Whether a gap is open (messages missing and being re-requested).
    pub fn recovering(&self) -> bool {
        self.gap.is_some()
    }

    /// The symbol registered for `locate` by its Stock Directory message.
    pub fn symbol(&self, locate: u16) -> Option<&[u8; 8]> {
        self.symbols
            .get(usize::from(locate))
            .and_then(Option::as_ref)
            .map(|s| &s.symbol)
    }

    /// When [`FeedHandler::handle_timeout`] next has something to do, if ever.
    pub fn poll_timeout(&self) -> Option<MonoNanos> {
        let end = match self.end {
            Some(e) if !self.ended && self.expected >= e.seq => {
                Some(e.since.add_duration(self.cfg.jump_quiet))
            }
            _ => None,
        };
        match (self.gap.map(|g| g.deadline), end) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Handles one MoldUDP64 packet that came from the re-request server (an answer to
    /// a [`RetransmitRequest`]), as [`FeedHandler::handle_datagram`] does a line's.
    /// Only an answer that fills part of a gap sends the next re-request at once: a
    /// gap that a line's packets fill in order (its end announced ahead of the stream,
    /// a forged heartbeat, say) is re-requested on its timeouts only (hostile-input
    /// pass: one forged heartbeat 90,000 ahead drew 7,020 re-requests, one per packet
    /// of the live stream).
    pub fn handle_retransmission<S: Sink + ?Sized>(
        &mut self,
        now: MonoNanos,
        packet: &[u8],
        sink: &mut S,
    ) {
        self.answer = true;
        self.handle_datagram(now, packet, sink);
        self.answer = false;
    }

    /// The re-request to send, if one is due (a newer one replaces an unsent one).
    pub fn poll_transmit(&mut self) -> Option<RetransmitRequest> {
        self.request.take()
    }

    /// Handles one MoldUDP64 packet (from the feed or a retransmission) received at
    /// `now` (it becomes the updates' receive timestamp).
    pub fn handle_datagram<S: Sink + ?Sized>(
        &mut self,
        now: MonoNanos,
        packet: &[u8],
        sink: &mut S,
    ) {
        self.counters.packets += 1;
        let p = match MoldPacket::parse(packet) {
            Ok(p) => p,
            Err(_) => {
                self.counters.truncated_packets += 1;
                self.counters.malformed += 1;
                return;
            }
        };
        if let Err(e) = p.validate() {
            match e {
                MoldError::Truncated(_) => self.counters.truncated_packets += 1,
                _ => self.counters.bad_blocks += 1,
            }
            self.counters.malformed += 1;
            return;
        }
        // Sequence numbers are 64-bit: a packet whose messages (or whose next
        // sequence number) would pass 2^64 - 1 cannot be applied in order. It used to
        // be counted in `packets` only, its messages neither applied nor malformed.
        if p.kind() == PacketKind::Messages
            && p.sequence()
                .checked_add(u64::from(p.message_count()))
                .is_none()
        {
            self.counters.bad_blocks += 1;
            self.counters.malformed += 1;
            return;
        }
        match self.session {
            Some(s) if s != p.session() => {
                self.counters.foreign_session += 1;
                self.last_foreign = Some(p.session());
            }
            Some(_) => self.handle_followed(now, &p, packet, sink),
            None => self.handle_unadopted(now, &p, packet, sink),
        }
    }

    /// A valid packet of the followed session.
    fn handle_followed<S: Sink + ?Sized>(
        &mut self,
        now: MonoNanos,
        p: &MoldPacket<'_>,
        packet: &[u8],
        sink: &mut S,
    ) {
        let (seq, next) = span(p);
        // Measured from the highest known position, but that counts at most
        // `max_jump` beyond our own: announcements cannot carry each other further
        // (a chain of forged heartbeats, each within `max_jump` of the one before,
        // had moved a live stream 19.7 million ahead with 200 datagrams).
        let max_jump = self.cfg.max_jump;
        let base = self
            .known_end
            .min(self.expected.saturating_add(max_jump))
            .max(self.expected);
        if seq > base.saturating_add(max_jump) {
            self.handle_suspect(now, p, packet, sink);
            return;
        }
        if let Some((from, to)) = self.skipped {
            // A packet bringing messages of the skip `from..to` that only an
            // announcement caused, or a heartbeat / End of Session saying the stream
            // is inside it: the stream is not where the announcement said.
            let inside = match p.kind() {
                PacketKind::Messages => seq < to && next > from,
                PacketKind::Heartbeat | PacketKind::EndOfSession => from <= seq && seq < to,
            };
            if inside && self.expected == to {
                self.take_back_skip(from, to, next.max(from));
            }
        }
        let alive = match p.kind() {
            PacketKind::Messages => next > self.expected,
            PacketKind::Heartbeat | PacketKind::EndOfSession => seq >= self.expected,
        };
        if alive {
            // The stream we follow goes on where it was: it contradicts the jump.
            if let Some(j) = self.jump.take() {
                self.recycle(j.packets);
            }
        }
        if let Some(e) = self.end {
            // After its End of Session a server sends nothing on its lines but copies
            // of it: a line's messages (below the end too: a forged end ahead of a live
            // stream, review) or heartbeat says the stream goes on. Answers to
            // re-requests do not, unless they bring messages past the end.
            let past = match p.kind() {
                PacketKind::Messages => !self.answer || next > e.seq,
                PacketKind::Heartbeat => true,
                PacketKind::EndOfSession => false,
            };
            if past {
                self.contradict_end(now);
            }
        }
        match p.kind() {
            PacketKind::Heartbeat | PacketKind::EndOfSession => {
                if p.kind() == PacketKind::Heartbeat {
                    self.counters.heartbeats += 1;
                } else if seq >= self.expected {
                    // Believed once the stream has reached it and stayed quiet
                    // (`session_ended`). Another while one stands (a copy) keeps the
                    // first one's time and the larger number; after one the stream went
                    // past, it starts afresh.
                    self.end = Some(match self.end {
                        Some(e) if e.contradicted.is_none() => End {
                            seq: e.seq.max(seq),
                            ..e
                        },
                        _ => {
                            self.ended = false;
                            End {
                                seq,
                                since: now,
                                contradicted: None,
                            }
                        }
                    });
                } else {
                    // Announces an end before messages already applied: not this
                    // session's end (a stale copy, or forged), so it ends nothing.
                    return;
                }
                self.known_end = self.known_end.max(seq);
            }
            PacketKind::Messages => {
                if next <= self.expected {
                    self.counters.duplicates += next - seq;
                    if next == self.expected {
                        // A line's copy of the last messages applied (an answer to a
                        // re-request came first): the stream is at `expected` too. Not
                        // counted as coming in order: the other line's late copies end
                        // there as well.
                        self.note_live_in_order(now, false);
                    }
                    return;
                }
                // No room to wait any longer: the oldest gap is given up now (its
                // messages counted lost) and what it held back is applied, rather than
                // dropping this packet, which would open a gap of its own (with 1% loss
                // and no answers, that turned ~1% into ~95% lost). By count one gap
                // makes room; by bytes it may take several (each gives up at least the
                // first held packet, so this ends).
                //
                // Unless a line has brought packets in order since the oldest held one
                // arrived: then the stream is alive at `expected`, below the hold, and
                // what is held ahead of it is the suspect part (hostile-input pass: a
                // burst of 9,000 forged packets within `max_jump` filled the hold, and
                // each further one gave up the gap at the live position, declaring
                // 86,627 real messages lost). The packets furthest ahead make room
                // instead: the highest held, or this one; either way counted in
                // `overflow`, and a dropped packet announces nothing.
                while seq > self.expected && self.held_full(seq, packet.len()) {
                    self.counters.overflow += 1;
                    if !self.answer && self.held.back().is_some_and(|h| h.next == seq) {
                        // This one continues the hold's top: the stream is up there.
                        self.run_extended_at = Some(now);
                    }
                    if self.live_below_hold(now) {
                        match self.held.back() {
                            Some(h) if h.seq > seq => {
                                if let Some(h) = self.held.pop_back() {
                                    self.held_bytes =
                                        self.held_bytes.saturating_sub(h.bytes.capacity());
                                    self.recycle_buffer(h.bytes);
                                }
                            }
                            _ => return,
                        }
                    } else {
                        self.give_up_gap(now, sink);
                    }
                }
                self.known_end = self.known_end.max(next);
                self.data_end = self.data_end.max(next);
                if seq > self.expected {
                    self.hold(seq, next, now, packet);
                } else {
                    self.note_live_in_order(now, true);
                    self.apply_packet(p, now, sink);
                    self.drain_held(sink);
                }
            }
        }
        self.check_gap(now);
        // Messages applied past the end (a packet held since before it arrived, say):
        // the stream went past it too (review).
        if self.skipped.is_none() && self.end.is_some_and(|e| self.expected > e.seq) {
            self.contradict_end(now);
        }
        self.check_end(now);
    }

    /// A packet in order at `expected` (or a copy ending there) arrived: a line's, it
    /// shows the stream alive at `expected` ([`FeedHandler::live_below_hold`]).
    fn note_live_in_order(&mut self, now: MonoNanos, counts: bool) {
        if !self.answer {
            self.live_in_order_at = Some(now);
            if counts && !self.held.is_empty() {
                self.in_order_since_hold = self.in_order_since_hold.saturating_add(1);
            }
        }
    }

    /// Whether the stream is alive below the hold now, so that what is held ahead is
    /// the suspect part: a line brought a packet in order since the hold began, and
    /// either the last packet of a line that looked like the stream
    /// (one in order, or one continuing the hold's top) was in order: after a real loss
    /// the stream's packets continue the hold's top, while forged packets scattered
    /// ahead continue nothing, however fast they come. Or at least two line packets came
    /// in order since the hold began, the last within `retransmit_timeout`: a forged run
    /// of consecutive numbers continues the top, but a live stream keeps coming in
    /// order beside it. A packet reordered beside a loss is one in-order packet, and
    /// the stream's packets after it continue the top.
    ///
    /// (A first version took any in-order packet since the hold began, and with it one
    /// lost packet became 2,432 lost messages: review. A second wanted one in the later
    /// half of the hold's life, which a stream slower than a forged burst never had.)
    fn live_below_hold(&self, now: MonoNanos) -> bool {
        // An in-order packet since the hold began (the oldest held packet's arrival).
        let Some(t) = self
            .live_in_order_at
            .filter(|&t| self.held.front().is_some_and(|h| t > h.received))
        else {
            return false;
        };
        let last_was_in_order = self.run_extended_at.is_none_or(|e| t > e);
        let keeps_coming =
            self.in_order_since_hold >= 2 && t.add_duration(self.cfg.retransmit_timeout) >= now;
        last_was_in_order || keeps_coming
    }

    /// Believes the End of Session once the stream has reached it and nothing has gone
    /// past it for `jump_quiet`.
    fn check_end(&mut self, now: MonoNanos) {
        if let Some(e) = self.end {
            if !self.ended
                && self.expected >= e.seq
                && now >= e.since.add_duration(self.cfg.jump_quiet)
            {
                self.ended = true;
            }
        }
    }

    /// A packet went past the End of Session at `now`: the session is not over. The
    /// quiet starts again; once the stream has gone on past it for `jump_quiet`, it was
    /// false (forged, or stale) and is forgotten.
    fn contradict_end(&mut self, now: MonoNanos) {
        let Some(mut e) = self.end else { return };
        self.ended = false;
        match e.contradicted {
            Some(first) if now >= first.add_duration(self.cfg.jump_quiet) => {
                // What only it announced goes too (review: kept, the gap up to it was
                // given up and taken back at every pause of the live stream).
                if self.known_end == e.seq {
                    self.known_end = self.data_end.max(self.expected);
                }
                self.end = None;
                self.counters.false_session_ends += 1;
                return;
            }
            Some(_) => e.since = now,
            None => {
                e.contradicted = Some(now);
                e.since = now;
            }
        }
        self.end = Some(e);
    }

    /// A packet of the followed session too far ahead to be believed: kept (bounded)
    /// until `confirm_packets` such packets agree, each bringing messages beyond the
    /// last (a copy or a heartbeat confirms nothing), and the followed stream has shown
    /// no life for `jump_quiet` since the first; then followed from the most recent of
    /// them (so a jump believed after a while lands where the stream is now).
    fn handle_suspect<S: Sink + ?Sized>(
        &mut self,
        now: MonoNanos,
        p: &MoldPacket<'_>,
        packet: &[u8],
        sink: &mut S,
    ) {
        self.counters.suspect_jumps += 1;
        let (seq, next) = span(p);
        let max_jump = self.cfg.max_jump;
        let joins = self
            .jump
            .as_ref()
            .is_some_and(|j| j.near(p.session(), seq, next, max_jump));
        if joins {
            let nothing_new = self.jump.as_ref().is_some_and(|j| next <= j.next);
            if nothing_new || p.kind() != PacketKind::Messages {
                // A copy, an older packet of the run, or a heartbeat: confirms nothing.
                return;
            }
        } else {
            // A new suspect run replaces the old one, reusing its buffers: a spoofer
            // sending scattered far-ahead packets costs no allocation per packet.
            let packets = match self.jump.take() {
                Some(j) => {
                    let mut packets = j.packets;
                    for h in packets.drain(..) {
                        self.recycle_buffer(h.bytes);
                    }
                    packets
                }
                None => Vec::with_capacity(self.cfg.confirm_packets),
            };
            self.jump = Some(Candidate {
                session: p.session(),
                first: seq,
                next,
                packets,
                born: self.counters.packets,
                since: now,
            });
            if p.kind() != PacketKind::Messages {
                // A heartbeat far ahead starts nothing to confirm.
                return;
            }
        }
        let held = self.copy(seq, next, now, packet);
        let confirm = self.cfg.confirm_packets;
        let Some(j) = self.jump.as_mut() else { return };
        if j.packets.len() == confirm {
            // Keep the most recent: the oldest goes.
            let oldest = j.packets.remove(0);
            self.recycle_buffer(oldest.bytes);
        }
        let Some(j) = self.jump.as_mut() else { return };
        j.packets.push(held);
        j.first = j.packets.iter().map(|h| h.seq).min().unwrap_or(seq);
        j.next = j.next.max(next);
        let quiet_ns = u64::try_from(self.cfg.jump_quiet.as_nanos()).unwrap_or(u64::MAX);
        if j.packets.len() < confirm || now.saturating_sub(j.since) < quiet_ns {
            return;
        }
        let Some(j) = self.jump.take() else { return };
        self.counters.accepted_jumps += 1;
        self.skip_to(j.first);
        self.replay(j.packets, sink);
    }

    /// Before a session is adopted: the packet joins (or starts) a candidate; the
    /// first candidate with `confirm_packets` packets is adopted and its packets are
    /// applied in arrival order.
    fn handle_unadopted<S: Sink + ?Sized>(
        &mut self,
        now: MonoNanos,
        p: &MoldPacket<'_>,
        packet: &[u8],
        sink: &mut S,
    ) {
        let (seq, next) = span(p);
        let session = p.session();
        let max_jump = self.cfg.max_jump;
        let i = match self
            .candidates
            .iter()
            .position(|c| c.near(session, seq, next, max_jump))
        {
            Some(i) => i,
            None => {
                if self.candidates.len() >= MAX_CANDIDATES {
                    let weakest = self
                        .candidates
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, c)| (c.packets.len(), c.born))
                        .map_or(0, |(i, _)| i);
                    let c = self.candidates.swap_remove(weakest);
                    self.counters.foreign_session += c.packets.len() as u64;
                    self.recycle(c.packets);
                }
                self.candidates.push(Candidate {
                    session,
                    first: seq,
                    next,
                    packets: Vec::with_capacity(self.cfg.confirm_packets),
                    born: self.counters.packets,
                    since: now,
                });
                self.candidates.len() - 1
            }
        };
        let held = self.copy(seq, next, now, packet);
        let c = &mut self.candidates[i];
        c.first = c.first.min(seq);
        c.next = c.next.max(next);
        c.packets.push(held);
        if c.packets.len() < self.cfg.confirm_packets {
            return;
        }
        let adopted = self.candidates.swap_remove(i);
        self.session = Some(adopted.session);
        for c in std::mem::take(&mut self.candidates) {
            let n = c.packets.len() as u64;
            if c.session == adopted.session {
                self.counters.suspect_jumps += n;
            } else {
                self.counters.foreign_session += n;
            }
            self.recycle(c.packets);
        }
        // Joining a session far beyond `first_sequence`: the candidate's packets agree,
        // so the jump is believed; what lies before it is counted lost, not re-requested.
        if adopted.first > self.expected.saturating_add(max_jump) {
            self.counters.accepted_jumps += 1;
            self.skip_to(adopted.first);
        }
        self.replay(adopted.packets, sink);
    }

    /// Follows a confirmed jump: every message before `to` not yet applied is lost.
    fn skip_to(&mut self, to: u64) {
        if to <= self.expected {
            return;
        }
        self.counters.lost = self.counters.lost.saturating_add(to - self.expected);
        self.expected = to;
        self.known_end = self.known_end.max(to);
        self.data_end = self.data_end.max(to);
        self.gap = None;
        self.request = None;
        self.requested = None;
        // Held packets wholly before the jump can never apply.
        while self.held.front().is_some_and(|h| h.next <= to) {
            let Some(h) = self.pop_held() else {
                break;
            };
            self.recycle_buffer(h.bytes);
        }
    }

    /// Applies kept packets of the followed session, in arrival order.
    fn replay<S: Sink + ?Sized>(&mut self, packets: Vec<Held>, sink: &mut S) {
        for h in &packets {
            if let Ok(p) = MoldPacket::parse(&h.bytes) {
                self.handle_followed(h.received, &p, &h.bytes, sink);
            }
        }
        self.recycle(packets);
    }

    /// A copy of a packet in a recycled buffer.
    fn copy(&mut self, seq: u64, next: u64, now: MonoNanos, packet: &[u8]) -> Held {
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(packet);
        Held {
            seq,
            next,
            received: now,
            bytes,
        }
    }

    fn recycle(&mut self, packets: Vec<Held>) {
        for h in packets {
            self.recycle_buffer(h.bytes);
        }
    }

    /// Keeps an emptied buffer for the next copy, unless it grew large.
    fn recycle_buffer(&mut self, bytes: Vec<u8>) {
        if bytes.capacity() <= SPARE_MAX_CAPACITY {
            self.spare.push(bytes);
        }
    }

    /// The first held packet, taken out of the hold.
    fn pop_held(&mut self) -> Option<Held> {
        let h = self.held.pop_front()?;
        self.held_bytes = self.held_bytes.saturating_sub(h.bytes.capacity());
        Some(h)
    }

    /// Handles the passage of time: repeats an unanswered re-request, or declares the
    /// missing messages lost after the last try. Spurious calls are no-ops.
    pub fn handle_timeout<S: Sink + ?Sized>(&mut self, now: MonoNanos, sink: &mut S) {
        self.check_end(now);
        let Some(mut gap) = self.gap else { return };
        if now < gap.deadline {
            return;
        }
        let tries = if self.unanswered {
            1
        } else {
            self.cfg.max_retransmit_tries
        };
        if gap.tries < tries {
            gap.tries += 1;
            gap.deadline = now.add_duration(self.cfg.retransmit_timeout);
            self.gap = Some(gap);
            self.queue_request();
            return;
        }
        self.unanswered = self.counters.recovered == gap.recovered;
        self.give_up_gap(now, sink);
        self.check_gap(now);
        self.check_end(now);
    }

    /// Declares the first missing range lost (up to the first held packet or the end
    /// announced) and applies the held packets that are then in order. The caller
    /// opens the next gap, if any (`check_gap`).
    fn give_up_gap<S: Sink + ?Sized>(&mut self, now: MonoNanos, sink: &mut S) {
        let end = self.missing_until();
        if end > self.expected && self.held.front().is_none_or(|h| h.seq > end) {
            // Only an announcement says the stream is at `end`: remembered (with the
            // skips right before it, nothing applied between) until a packet proves it
            // or anything is applied.
            let from = match self.skipped {
                Some((from, to)) if to == self.expected => from,
                _ => self.expected,
            };
            self.skipped = Some((from, end));
            // An End of Session reached this way waits its quiet from now: the live
            // stream's next packet can still take the skip back (review: believed at
            // once, a forged end ahead of a pausing stream stopped the feed).
            if let Some(e) = self.end.as_mut().filter(|e| end >= e.seq) {
                e.since = e.since.max(now);
            }
        }
        self.counters.lost = self
            .counters
            .lost
            .saturating_add(end.saturating_sub(self.expected));
        self.expected = end.max(self.expected);
        self.gap = None;
        self.drain_held(sink);
    }

    /// A packet showed the stream inside the gaps `from..to` given up on an
    /// announcement alone, and nothing was applied since: the announcement was false.
    /// The skip is undone (the position; `taken_back` offsets `lost`), the announced end
    /// forgotten
    /// (`next`: the packet's own), and the caller applies or holds the packet.
    #[cold]
    fn take_back_skip(&mut self, from: u64, to: u64, next: u64) {
        self.skipped = None;
        self.counters.false_ends += 1;
        self.counters.taken_back = self.counters.taken_back.saturating_add(to - from);
        self.expected = from;
        // An answer (a real end's last messages, come back late) leaves the End of
        // Session standing: the stream must still reach it, or it is never reached. A
        // line's packet has gone past it instead (review: kept, a forged end ahead of a
        // pausing live stream was given up and taken back at every pause).
        self.known_end = match self.answer {
            true => next.max(self.end.map_or(0, |e| e.seq)),
            false => next,
        };
        self.gap = None;
        self.requested = None;
        self.ended = false;
    }

    /// Whether holding a packet of `len` bytes starting at `seq` would need room that
    /// is not there (`max_held_packets` held, or `max_held_bytes` would be passed, and
    /// it is not one of them).
    fn held_full(&self, seq: u64, len: usize) -> bool {
        !self.held.is_empty()
            && (self.held.len() >= self.cfg.max_held_packets
                || self.held_bytes.saturating_add(len) > self.cfg.max_held_bytes)
            && self.held.binary_search_by_key(&seq, |h| h.seq).is_err()
    }

    /// End (exclusive) of the first missing range: the first held packet or the end
    /// announced by the newest packet.
    fn missing_until(&self) -> u64 {
        self.held
            .front()
            .map_or(self.known_end, |h| h.seq.min(self.known_end))
    }

    /// Opens, advances or closes the gap after the state changed.
    fn check_gap(&mut self, now: MonoNanos) {
        let end = self.missing_until();
        if self.expected >= end {
            if self.gap.take().is_some_and(|g| g.tries == 0) {
                self.counters.line_filled += 1;
            }
            return;
        }
        self.missing_end = self.missing_end.max(end);
        match self.gap {
            Some(g) if g.first == self.expected => {}
            Some(g)
                if !self.answer
                    && self
                        .requested
                        .is_some_and(|(from, to)| from <= self.expected && self.expected < to) =>
            {
                // A line's packets moved the gap on inside what was already asked for:
                // no answer came, so nothing new to ask. The stream is making progress,
                // so the gap's timeouts start again, as for a gap that moved before
                // (kept, they gave the gap up while the live stream was filling it,
                // and what was held ahead was taken for the stream's position).
                let (tries, wait) = match g.tries {
                    0 => (0, self.cfg.line_wait),
                    _ => (1, self.cfg.retransmit_timeout),
                };
                self.gap = Some(Gap {
                    first: self.expected,
                    tries,
                    deadline: now.add_duration(wait),
                    ..g
                });
            }
            open => {
                if open.is_none() {
                    self.counters.gaps += 1;
                }
                // A gap already being re-requested that moved on keeps re-requesting.
                if self.cfg.line_wait.is_zero() || open.is_some_and(|g| g.tries > 0) {
                    // With a silent server (one try a gap), a gap's wait runs from when
                    // it was seen (the arrival of the first packet held behind it), not
                    // from when the gaps before it were given up. Timed from then, each
                    // gap waited its full timeout in turn while later ones queued behind
                    // it: 1% loss at 24k packets/s opens a gap every ~4 ms but closed
                    // one per 50 ms, so the hold sat full and the feed ran --max-held
                    // packets behind, and its socket overflowed (kernel drops: 16-40k of
                    // 349k datagrams in a replay, where a 1 ms timeout had none).
                    let seen = match self.held.front() {
                        Some(h) if self.unanswered => h.received.min(now),
                        _ => now,
                    };
                    self.gap = Some(Gap {
                        first: self.expected,
                        tries: 1,
                        deadline: seen.add_duration(self.cfg.retransmit_timeout),
                        recovered: self.counters.recovered,
                    });
                    self.queue_request();
                } else {
                    // Give the other line its chance first: the first re-request goes
                    // out at the deadline if the gap is still open (handle_timeout).
                    self.gap = Some(Gap {
                        first: self.expected,
                        tries: 0,
                        deadline: now.add_duration(self.cfg.line_wait),
                        recovered: self.counters.recovered,
                    });
                }
            }
        }
    }

    fn queue_request(&mut self) {
        let Some(session) = self.session else { return };
        let missing = self.missing_until().saturating_sub(self.expected);
        let count = missing.min(u64::from(self.cfg.max_request_count)) as u16;
        self.request = Some(RetransmitRequest {
            session,
            sequence: self.expected,
            count,
        });
        self.requested = Some((
            self.expected,
            self.expected.saturating_add(u64::from(count)),
        ));
        self.counters.requests += 1;
    }

    /// Keeps a copy of a packet that arrived ahead of the expected sequence number.
    fn hold(&mut self, seq: u64, next: u64, now: MonoNanos, packet: &[u8]) {
        let at = match self.held.binary_search_by_key(&seq, |h| h.seq) {
            Ok(_) => {
                self.counters.duplicates += next - seq;
                return;
            }
            Err(at) => at,
        };
        if self.held.len() >= self.cfg.max_held_packets
            || self.held_bytes.saturating_add(packet.len()) > self.cfg.max_held_bytes
        {
            // Only reachable with a limit of 0, or a packet larger than
            // `max_held_bytes` alone: the caller made room otherwise.
            self.counters.overflow += 1;
            return;
        }
        if self.held.is_empty() {
            self.in_order_since_hold = 0;
        }
        if !self.answer && at == self.held.len() && self.held.back().is_some_and(|h| h.next == seq)
        {
            self.run_extended_at = Some(now);
        }
        let held = self.copy(seq, next, now, packet);
        self.held_bytes = self.held_bytes.saturating_add(held.bytes.capacity());
        self.held.insert(at, held);
    }

    /// Applies every held packet that has become in order.
    fn drain_held<S: Sink + ?Sized>(&mut self, sink: &mut S) {
        while self.held.front().is_some_and(|h| h.seq <= self.expected) {
            let Some(h) = self.pop_held() else {
                break;
            };
            if h.next <= self.expected {
                self.counters.duplicates += h.next - h.seq;
            } else if let Ok(p) = MoldPacket::parse(&h.bytes) {
                self.apply_packet(&p, h.received, sink);
            }
            self.recycle_buffer(h.bytes);
        }
    }

    /// Applies the messages of a validated packet from `expected` on.
    fn apply_packet<S: Sink + ?Sized>(
        &mut self,
        p: &MoldPacket<'_>,
        received: MonoNanos,
        sink: &mut S,
    ) {
        // The stream moved on from the skip: it can no longer be taken back.
        self.skipped = None;
        // Warm the order map first: one pass of lookups over the packet's order
        // references, independent of each other, so the CPU overlaps their cache
        // misses. The pass that applies the messages does too much work per message
        // for the CPU to reach ahead to the next message's lookup, and would take the
        // misses one at a time. Measured in BENCHMARKS.md (market data).
        if p.message_count() > 1 {
            let mut live = 0u32;
            for block in p.messages() {
                let Ok(block) = block else { break };
                if let Some(r) = itch::order_ref_of(block.data) {
                    live += u32::from(self.books.warm(r));
                }
            }
            std::hint::black_box(live);
        }
        for block in p.messages() {
            let Ok(block) = block else { break };
            if block.sequence < self.expected {
                self.counters.duplicates += 1;
                continue;
            }
            self.counters.messages += 1;
            if block.sequence < self.missing_end {
                self.counters.recovered += 1;
                self.unanswered = false;
            }
            self.expected = block.sequence.saturating_add(1);
            self.apply_message(block.sequence, block.data, received, sink);
        }
    }

    /// Decodes one ITCH message, updates the books and publishes what changed.
    #[inline]
    fn apply_message<S: Sink + ?Sized>(
        &mut self,
        seq: u64,
        data: &[u8],
        received: MonoNanos,
        sink: &mut S,
    ) {
        let msg = match itch::decode(data) {
            Ok(m) => m,
            Err(DecodeError::UnknownType(_)) | Err(DecodeError::Empty) => {
                self.counters.unknown_types += 1;
                self.counters.malformed += 1;
                return;
            }
            Err(_) => {
                self.counters.bad_messages += 1;
                self.counters.malformed += 1;
                return;
            }
        };
        let h = msg.header();
        let mut stamp = Stamp {
            seq,
            exchange_ns: h.timestamp,
            received,
        };
        let change = match msg {
            Message::AddOrder(a) => self.books.add(
                a.header.stock_locate,
                a.order_ref,
                a.side,
                a.shares,
                a.price.0,
            ),
            Message::AddOrderMpid(a) => self.books.add(
                a.header.stock_locate,
                a.order_ref,
                a.side,
                a.shares,
                a.price.0,
            ),
            Message::OrderExecuted(e) => {
                let x = self.books.execute(e.order_ref, e.executed_shares);
                if let Some(x) = x {
                    let t = Trade {
                        price: x.change.price,
                        shares: x.shares,
                        side: x.change.side,
                        source: b'E',
                        flags: 0,
                        match_number: e.match_number,
                    };
                    self.publish_trade(x.change.locate, &stamp, &t, sink);
                }
                x.map(|x| x.change)
            }
            Message::OrderExecutedWithPrice(c) => {
                let x = self.books.execute(c.order_ref, c.executed_shares);
                if let Some(x) = x {
                    let t = Trade {
                        price: c.execution_price.0,
                        shares: x.shares,
                        side: x.change.side,
                        source: b'C',
                        flags: if c.printable == b'N' {
                            trade_flags::NON_PRINTABLE
                        } else {
                            0
                        },
                        match_number: c.match_number,
                    };
                    self.publish_trade(x.change.locate, &stamp, &t, sink);
                }
                x.map(|x| x.change)
            }
            Message::OrderCancel(x) => self.books.cancel(x.order_ref, x.cancelled_shares),
            Message::OrderDelete(d) => self.books.delete(d.order_ref),
            Message::OrderReplace(u) => {
                self.books
                    .replace(u.original_order_ref, u.new_order_ref, u.shares, u.price.0)
            }
            Message::Trade(p) => {
                let t = Trade {
                    price: p.price.0,
                    shares: p.shares,
                    side: p.side,
                    source: b'P',
                    flags: trade_flags::NON_DISPLAYED,
                    match_number: p.match_number,
                };
                self.publish_trade(p.header.stock_locate, &stamp, &t, sink);
                None
            }
            Message::StockDirectory(d) => {
                self.register(d.header.stock_locate, d.stock.0);
                None
            }
            _ => None,
        };
        if let Some(c) = change {
            stamp.seq = seq;
            self.publish_book(c, &stamp, sink);
        }
    }

    /// Builds the topics of a symbol (allocates, once per directory message).
    fn register(&mut self, locate: u16, symbol: [u8; 8]) {
        self.books.ensure(locate);
        let i = usize::from(locate);
        if self.symbols.len() <= i {
            self.symbols.resize_with(i + 1, || None);
        }
        let name = itch::alpha_str(&symbol).unwrap_or("");
        let topic = |kind: &str| Topic::new(&format!("md/{}/{}/{}", self.cfg.venue, name, kind));
        let valid = !name.is_empty() && !name.contains(['/', '*', '>']);
        self.symbols[i] = match (valid, topic("trade"), topic("quote"), topic("depth")) {
            (true, Ok(trade), Ok(quote), Ok(depth)) => Some(Symbol {
                symbol,
                trade,
                quote,
                depth,
                last_quote: Quote::default(),
            }),
            _ => None,
        };
    }

    fn publish_trade<S: Sink + ?Sized>(
        &mut self,
        locate: u16,
        st: &Stamp,
        t: &Trade,
        sink: &mut S,
    ) {
        let Some(Some(sym)) = self.symbols.get(usize::from(locate)) else {
            self.counters.unpublished += 1;
            return;
        };
        self.out.clear();
        update::encode_trade(&mut self.out, &st.header(locate, sym.symbol), t);
        sink.publish(&sym.trade, &self.out);
        self.counters.published += 1;
    }

    fn publish_book<S: Sink + ?Sized>(&mut self, c: Change, st: &Stamp, sink: &mut S) {
        let depth = self.cfg.depth_levels;
        let top = c.rank == 0;
        let deep = c.rank < depth;
        if !top && !deep {
            return;
        }
        let (Some(Some(sym)), Some(book)) = (
            self.symbols.get_mut(usize::from(c.locate)),
            self.books.book(c.locate),
        ) else {
            self.counters.unpublished += 1;
            return;
        };
        let h = st.header(c.locate, sym.symbol);
        if top {
            let t = book.top();
            let q = Quote {
                bid_price: t.bid.price,
                ask_price: t.ask.price,
                bid_shares: t.bid.shares,
                ask_shares: t.ask.shares,
                bid_orders: t.bid.orders,
                ask_orders: t.ask.orders,
            };
            // The best level was touched but can be unchanged (a replace at the same
            // price and size): a quote is published only when the top changed.
            if q != sym.last_quote {
                sym.last_quote = q;
                self.out.clear();
                update::encode_quote(&mut self.out, &h, &q);
                sink.publish(&sym.quote, &self.out);
                self.counters.published += 1;
            }
        }
        if deep {
            self.out.clear();
            update::encode_depth(
                &mut self.out,
                &h,
                book.depth(Side::Buy, depth),
                book.depth(Side::Sell, depth),
            );
            sink.publish(&sym.depth, &self.out);
            self.counters.published += 1;
        }
    }
}

/// The sequence numbers a valid packet covers: `seq..next` (empty for heartbeats and
/// End of Session, which announce `seq` as the next one).
fn span(p: &MoldPacket<'_>) -> (u64, u64) {
    let seq = p.sequence();
    match p.kind() {
        PacketKind::Messages => (seq, seq.saturating_add(u64::from(p.message_count()))),
        PacketKind::Heartbeat | PacketKind::EndOfSession => (seq, seq),
    }
}

/// Per-message header fields.
struct Stamp {
    seq: u64,
    exchange_ns: u64,
    received: MonoNanos,
}

impl Stamp {
    #[inline]
    fn header(&self, locate: u16, symbol: [u8; 8]) -> Header {
        Header {
            locate,
            symbol,
            seq: self.seq,
            exchange_ns: self.exchange_ns,
            receive_ns: self.received.as_nanos(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_itch::{
        AddOrder, Header as ItchHeader, OrderDelete, PacketBuilder, Price, StockDirectory,
        Symbol as ItchSymbol,
    };

    fn dir(locate: u16, name: &str) -> Message {
        let header = ItchHeader {
            stock_locate: locate,
            tracking_number: 0,
            timestamp: 1,
        };
        Message::from(StockDirectory::common_stock(
            header,
            ItchSymbol::new(name).unwrap(),
        ))
    }

    fn packet(seq: u64, msgs: &[Message]) -> Vec<u8> {
        let mut b = PacketBuilder::new(Session::new("TEST").unwrap(), seq, 1400);
        for m in msgs {
            b.push_message(m).unwrap();
        }
        b.finish().to_vec()
    }

    /// A MoldUDP64 packet of session TEST with one message block of `len` bytes (an
    /// unknown ITCH type: applied as a bad message, which is all a hold test needs).
    fn big_packet(seq: u64, len: usize) -> Vec<u8> {
        let mut p = b"TEST      ".to_vec();
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&1u16.to_be_bytes());
        p.extend_from_slice(&(len as u16).to_be_bytes());
        p.resize(p.len() + len, b'z');
        p
    }

    /// Probe F6b: the hold was bounded by count only (8192 packets), so datagrams of
    /// up to 64 KiB ahead of a gap could hold about 0.5 GiB. Now `max_held_bytes`
    /// bounds it as the count does: a packet that does not fit gives up the oldest gap
    /// (counted in `overflow`, its messages in `lost`) and is kept.
    #[test]
    fn regression_held_packets_are_bounded_by_bytes() {
        let cfg = FeedConfig {
            session: Some(Session::new("TEST").unwrap()),
            max_held_bytes: MIN_MAX_HELD_BYTES,
            ..FeedConfig::default()
        };
        let mut f = FeedHandler::new(cfg).unwrap();
        let mut sink = |_: &str, _: &[u8]| {};
        let t = MonoNanos(1_000_000_000);
        f.handle_datagram(t, &packet(1, &[dir(1, "AAPL")]), &mut sink);
        // 2 missing, 3 held, 4 missing, 5 held, ...: 30 kB packets, two fit.
        for (i, seq) in (3..=41).step_by(2).enumerate() {
            f.handle_datagram(t, &big_packet(seq, 30_000), &mut sink);
            assert!(
                f.held_bytes <= MIN_MAX_HELD_BYTES,
                "{} bytes held",
                f.held_bytes
            );
            assert_eq!(f.held.len(), (i + 1).min(2), "packet {seq}");
            assert_eq!(f.counters().overflow, i.saturating_sub(1) as u64);
        }
        // 20 held in turn; 18 gaps given up to make room, each one message lost and
        // its packet applied.
        assert_eq!(f.counters().lost, 18);
        assert_eq!(f.counters().messages, 1 + 18);
        assert_eq!(f.expected_sequence(), 38);
        // The buffers grown for 30 kB packets are not kept once emptied.
        assert!(f.spare.iter().all(|b| b.capacity() <= SPARE_MAX_CAPACITY));
        // A limit below the largest datagram is refused.
        let small = FeedConfig {
            max_held_bytes: MIN_MAX_HELD_BYTES - 1,
            ..FeedConfig::default()
        };
        assert_eq!(
            FeedHandler::new(small).err(),
            Some(ConfigError::MaxHeldBytes)
        );
    }

    /// Probe F6c: a packet whose range crosses 2^64 was counted in `packets` but its
    /// messages were neither applied nor counted malformed. Now it is malformed (in
    /// `bad_blocks`); a packet ending exactly at u64::MAX applies. A confirmed jump
    /// close to 2^64 counts the messages skipped, without wrapping.
    #[test]
    fn regression_sequence_numbers_near_2_pow_64() {
        let mut sink = |_: &str, _: &[u8]| {};
        let t = MonoNanos(1_000_000_000);
        let cfg = FeedConfig {
            session: Some(Session::new("TEST").unwrap()),
            first_sequence: u64::MAX - 4,
            ..FeedConfig::default()
        };
        let mut f = FeedHandler::new(cfg).unwrap();
        f.handle_datagram(
            t,
            &packet(u64::MAX - 4, &[dir(1, "A"), dir(2, "B")]),
            &mut sink,
        );
        assert_eq!(f.counters().messages, 2);
        let ten: Vec<Message> = (0..10).map(|i| dir(10 + i, "C")).collect();
        f.handle_datagram(t, &packet(u64::MAX - 2, &ten), &mut sink);
        assert_eq!(f.counters().malformed, 1);
        assert_eq!(f.counters().bad_blocks, 1);
        assert_eq!(f.counters().messages, 2);
        assert_eq!(f.expected_sequence(), u64::MAX - 2);
        f.handle_datagram(
            t,
            &packet(u64::MAX - 2, &[dir(3, "D"), dir(4, "E")]),
            &mut sink,
        );
        assert_eq!(f.counters().messages, 4);
        assert_eq!(f.expected_sequence(), u64::MAX);
        // The message numbered u64::MAX would leave no next sequence number.
        f.handle_datagram(t, &packet(u64::MAX, &[dir(5, "F")]), &mut sink);
        assert_eq!(f.counters().malformed, 2);
        assert_eq!(f.counters().messages, 4);
        assert_eq!(f.counters().lost, 0);

        // A jump from 1 to u64::MAX - 10, confirmed by three packets over `jump_quiet`
        // (the old position silent).
        let cfg = FeedConfig {
            session: Some(Session::new("TEST").unwrap()),
            jump_quiet: Duration::from_secs(2),
            ..FeedConfig::default()
        };
        let mut f = FeedHandler::new(cfg).unwrap();
        let at = |k: u64| MonoNanos(t.0 + k * 1_000_000_000);
        for (k, seq) in [(0, u64::MAX - 10), (1, u64::MAX - 9), (2, u64::MAX - 8)] {
            f.handle_datagram(at(k), &packet(seq, &[dir(1, "A")]), &mut sink);
        }
        assert_eq!(f.counters().accepted_jumps, 1);
        assert_eq!(f.counters().lost, u64::MAX - 11);
        assert_eq!(f.counters().messages, 3);
        assert_eq!(f.expected_sequence(), u64::MAX - 7);
        // A gap after it, given up: its two messages add to `lost` (checked: no wrap).
        f.handle_datagram(at(2), &packet(u64::MAX - 5, &[dir(1, "A")]), &mut sink);
        for k in 3..=6 {
            f.handle_timeout(at(k), &mut sink);
        }
        assert_eq!(f.counters().lost, u64::MAX - 9);
        assert_eq!(f.counters().malformed, 0);
    }

    /// Regression: with no re-request server (a replay), each gap after the first
    /// waited its own timeout from when the gap before it was given up, so gaps that
    /// opened within a few ms of each other closed one per timeout, the hold filled and
    /// the feed ran --max-held packets behind until its socket overflowed. Now gaps seen
    /// together expire together, once the server is known silent.
    #[test]
    fn regression_gaps_seen_together_expire_together_once_the_server_is_silent() {
        let ms = |n: u64| MonoNanos(1_000_000_000 + n * 1_000_000);
        let cfg = FeedConfig {
            session: Some(Session::new("TEST").unwrap()),
            retransmit_timeout: Duration::from_millis(50),
            max_retransmit_tries: 3,
            ..FeedConfig::default()
        };
        let mut f = FeedHandler::new(cfg).unwrap();
        let mut sink = |_: &str, _: &[u8]| {};
        f.handle_datagram(ms(0), &packet(1, &[dir(1, "AAPL")]), &mut sink);
        // Ten gaps in a row, all seen at 0 ms: 2 missing, 3 held, 4 missing, 5 held...
        for seq in (3..=21).step_by(2) {
            f.handle_datagram(ms(0), &packet(seq, &[dir(2, "MSFT")]), &mut sink);
        }
        assert_eq!(f.counters().gaps, 1);
        // The first gap: three tries 50 ms apart, nothing comes back.
        for t in [50, 100, 150] {
            f.handle_timeout(ms(t), &mut sink);
        }
        assert_eq!(f.counters().lost, 1, "{f:?}");
        // The other nine were seen 150 ms ago: each is given up on its own turn, at
        // once, not one per 50 ms.
        for _ in 0..9 {
            let due = f.poll_timeout().expect("a gap is open");
            assert!(due <= ms(151), "gap due at {due:?}: {f:?}");
            f.handle_timeout(ms(151), &mut sink);
        }
        assert!(!f.recovering(), "{f:?}");
        assert_eq!(f.counters().lost, 10, "{f:?}");
        assert_eq!(f.expected_sequence(), 22);
        assert_eq!(f.counters().messages, 11);
    }

    #[test]
    fn add_publishes_a_quote_and_delete_clears_it() {
        let cfg = FeedConfig {
            session: Some(Session::new("TEST").unwrap()),
            ..FeedConfig::default()
        };
        let mut f = FeedHandler::new(cfg).unwrap();
        let add = Message::from(AddOrder {
            header: ItchHeader {
                stock_locate: 3,
                tracking_number: 0,
                timestamp: 5,
            },
            order_ref: 9,
            side: Side::Buy,
            shares: 100,
            stock: ItchSymbol::new("AAPL").unwrap(),
            price: Price(1_000_000),
        });
        let del = Message::from(OrderDelete {
            header: ItchHeader {
                stock_locate: 3,
                tracking_number: 0,
                timestamp: 6,
            },
            order_ref: 9,
        });
        let mut got = Vec::new();
        let mut sink = |t: &str, p: &[u8]| got.push((t.to_string(), p.to_vec()));
        f.handle_datagram(
            MonoNanos(77),
            &packet(1, &[dir(3, "AAPL"), add, del]),
            &mut sink,
        );
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, "md/NASDAQ/AAPL/quote");
        let Ok(update::Update::Quote(h, q)) = update::decode(&got[0].1) else {
            panic!("not a quote");
        };
        assert_eq!(
            (h.locate, h.seq, h.exchange_ns, h.receive_ns),
            (3, 2, 5, 77)
        );
        assert_eq!(
            (q.bid_price, q.bid_shares, q.bid_orders),
            (1_000_000, 100, 1)
        );
        let Ok(update::Update::Quote(_, q)) = update::decode(&got[1].1) else {
            panic!("not a quote");
        };
        assert_eq!(q, Quote::default());
        assert_eq!(f.counters().messages, 3);
        assert_eq!(f.counters().published, 2);
        assert_eq!(f.expected_sequence(), 4);
    }

    #[test]
    fn config_is_validated() {
        // The defaults with one change; true when the handler refuses them.
        let bad = |change: fn(&mut FeedConfig)| {
            let mut c = FeedConfig::default();
            change(&mut c);
            FeedHandler::new(c).is_err()
        };
        assert!(bad(|c| c.depth_levels = 65));
        assert!(bad(|c| c.max_request_count = 0));
        assert!(bad(|c| c.max_retransmit_tries = 0));
        assert!(bad(|c| c.confirm_packets = 0));
        assert!(bad(|c| c.confirm_packets = MAX_CONFIRM_PACKETS + 1));
        assert!(bad(|c| c.max_jump = 0));
        assert!(bad(|c| c.venue = "a/b".into()));
        assert!(bad(|c| c.venue = String::new()));
        assert!(!bad(|c| c.depth_levels = 5));
    }
}
