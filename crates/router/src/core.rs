//! The routing core: every client's protocol state, the subscription index, routing
//! and counters. No IO and no clock: the driver feeds it bytes and the time, and
//! drains each client's egress buffer to its socket.
//!
//! Vocabulary (quinn's, shared by every tickwire protocol core): `handle_*` feeds input
//! in (a connection, bytes, bytes written, a timeout, a closed socket), `poll_*` takes
//! output out (clients with bytes to transmit, clients to close, the next deadline).
//!
//! Driving it (see `driver.rs`), once per loop turn:
//! 1. [`Core::handle_accept`] a new connection, getting its [`Slot`].
//! 2. [`Core::handle_input`] with the bytes read; it consumes whole frames and returns
//!    how many bytes it used (the rest is an incomplete frame to keep).
//! 3. For each id from [`Core::poll_transmit`], write [`Core::egress`] to the socket
//!    and report the count with [`Core::handle_written`].
//! 4. [`Core::handle_timeout`] now and then; [`Core::poll_closing`] once per turn tells
//!    which clients to close once their egress is flushed (or at once, if they stopped
//!    reading), and takes a bounded share of closing clients' subscriptions out of the
//!    index (do not sleep while [`Core::has_pending_teardown`]);
//!    [`Core::handle_closed`] when a socket is gone.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::collections::{hash_set, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tickwire_wire::frame::{self, caps, ErrorCode, Frame, Image, PROTOCOL_VERSION};
use tickwire_wire::gm::QueueOp;
use tickwire_wire::topic::{validate_pattern, validate_topic, TopicMemo};

use crate::auth::{
    Authenticator, Grant, Identity, LoginError, PublishCache, Requesters, Responses,
    MAX_REQUESTERS_PER_TOPIC,
};

use crate::cache::{Cache, CacheLimits};
use crate::config::{Config, SlowConsumerPolicy};
use crate::egress::{Egress, Push};
use crate::gm::{self, Engine, NoSpool, Progress, Reject, SpoolPort};
use crate::groups::{self, Groups, Look, MAX_PASSED_OVER};
use crate::index::{Slot, SubscriptionIndex};
use tickwire_rt::{MonoNanos, TokenBucket, UtcNanos};

/// A client's identity for logs, stats and WELCOME: unique for the router's lifetime
/// (a counter from 1), unlike its [`Slot`], which is reused after it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ClientId(pub u64);

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a client is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Connected, HELLO not yet received.
    Handshake,
    /// HELLO offered a login: the AUTH frame is awaited (within the handshake timeout).
    Login,
    /// HELLO accepted.
    Open,
    /// Being closed: nothing more is read or routed to it; its egress is flushed.
    Closing,
}

/// One client's counters, as shown by `tickwire stats`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClientCounters {
    /// Messages published by the client.
    pub msgs_in: u64,
    /// Bytes received from the client (all frames).
    pub bytes_in: u64,
    /// Messages queued for delivery to the client.
    pub msgs_out: u64,
    /// Bytes written to the client's socket (all frames).
    pub bytes_out: u64,
    /// Messages discarded because the client read too slowly.
    pub discards: u64,
}

/// Whether the current input's `now` was read after its bytes ([`Core::input_clock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputClock {
    /// Read after them: it is their router-in time.
    Fresh,
    /// Read before them: a STAMPS message reads the clock.
    Stale,
    /// Read before them, and the call's first STAMPS message read this.
    Read(MonoNanos),
}

/// Totals over the router's life (including disconnected clients).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Connections accepted.
    pub connections: u64,
    /// Connections refused at the connection limit.
    pub refused: u64,
    /// Connections closed at the connection limit, not yet logged in (no HELLO, or no
    /// AUTH after it), the oldest first, to admit a new one.
    pub evicted_before_login: u64,
    /// Connections closed because of a protocol error, stall or slow consumer.
    pub disconnects_error: u64,
    /// Messages published (received from publishers).
    pub msgs_in: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// Messages queued to subscribers (one per matching subscriber).
    pub msgs_out: u64,
    /// Bytes written.
    pub bytes_out: u64,
    /// Messages discarded for slow subscribers.
    pub discards: u64,
    /// Of `discards`, those discarded because all egress buffers together held
    /// `egress_memory_limit` or more (the client was over its share, within its own
    /// `egress_limit`).
    pub memory_discards: u64,
    /// Clients disconnected (SLOW_CONSUMER) because all egress buffers together held
    /// `egress_memory_limit` or more and the client was over its share (also counted in
    /// `disconnects_error`).
    pub memory_disconnects: u64,
    /// Direct (not guaranteed) published messages that matched no subscriber.
    pub unrouted: u64,
    /// Requests (PUBLISH with a reply topic) answered NO_RESPONDERS: they matched no
    /// subscriber (also counted in `unrouted`).
    pub no_responders: u64,
    /// Requests answered BUSY: the responders they matched could not take their reply
    /// (`allow_responses` bounds) and nobody else was handed them.
    pub requests_busy: u64,
    /// Logins refused (bad credentials, or none where the listener requires one).
    pub auth_failures: u64,
    /// Connections refused at their user's connection limit.
    pub user_limit_refused: u64,
    /// Actions refused PERMISSION_DENIED (publishes, subscriptions, stats, queues).
    pub denied: u64,
    /// TLS connections closed at accept, before their handshake: more than
    /// `tls_handshake_rate` a second from their source.
    pub tls_throttled: u64,
}

/// Where a client is connected from, as stats and logs show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A TCP (or TLS) connection from this address.
    Tcp(SocketAddr),
    /// A shared-memory connection on this host, from the process the kernel recorded
    /// when it connected to the handshake socket (`SO_PEERCRED`), when it could say.
    Shm {
        /// Its process id.
        pid: Option<u32>,
        /// Its user id.
        uid: Option<u32>,
    },
}

impl From<SocketAddr> for Peer {
    fn from(a: SocketAddr) -> Self {
        Peer::Tcp(a)
    }
}

impl std::fmt::Display for Peer {
    /// `127.0.0.1:50312`, `shm pid 4711 uid 1000`, or `shm` when the process is unknown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(a) => a.fmt(f),
            Peer::Shm { pid, uid } => {
                f.write_str("shm")?;
                if let Some(p) = pid {
                    write!(f, " pid {p}")?;
                }
                if let Some(u) = uid {
                    write!(f, " uid {u}")?;
                }
                Ok(())
            }
        }
    }
}

struct Client {
    id: ClientId,
    phase: Phase,
    /// Closed at the connection limit before it logged in ([`Core::evict_before_login`]):
    /// it no longer holds a place in `max_clients` while it goes.
    evicted: bool,
    /// Since when it could have said HELLO: its accept, or for TLS the end of its
    /// handshake (`None` while that runs: it is not closed for a newcomer meanwhile).
    login_clock: Option<MonoNanos>,
    name: String,
    addr: Peer,
    connected_at: MonoNanos,
    connected_unix_ms: u64,
    /// When the first byte of the unfinished frame arrived, if one is unfinished: the
    /// frame must be complete within the stall timeout of this (more bytes of the same
    /// frame do not extend it).
    frame_started: Option<MonoNanos>,
    /// Shared with monitoring snapshots ([`Core::snapshot`]).
    patterns: HashSet<Arc<str>>,
    /// `patterns` as the last snapshot copied them, until they change: a snapshot of
    /// a client whose subscriptions did not change copies one pointer, not a reference
    /// per pattern (hostile-input probe: 300 clients of 10,000 patterns made every
    /// `/varz` snapshot stall the loop 177 ms).
    patterns_view: Option<Arc<[Arc<str>]>>,
    /// `patterns` changed since `patterns_view` was copied: the next snapshot with
    /// copies to spare ([`SNAPSHOT_PATTERN_COPIES`]) copies them again.
    patterns_stale: bool,
    /// Levels of `patterns` in all (`max_subscription_levels`).
    levels: usize,
    /// Shared subscriptions among `patterns` (`max_shared_subscriptions`).
    shared: usize,
    egress: Egress,
    dirty: bool,
    discarding: bool,
    counters: ClientCounters,
    close_reason: Option<(ErrorCode, String)>,
    /// `counters.bytes_out` once the last STATS_REPLY queued is written (at most one
    /// is outstanding per client: see docs/protocol.md, "Stats").
    stats_due: Option<u64>,
    /// The same for the last queue LIST answer.
    list_due: Option<u64>,
    /// The client has published a direct message: it is read with the direct traffic
    /// (see [`Core::is_background`]).
    direct_publisher: bool,
    /// Who it is, once admitted (anonymous or logged in); counted in
    /// [`Core`]'s per-identity connections while set.
    identity: Option<Arc<Identity>>,
    /// Its publish decisions by topic, when its identity has publish rules (`None`: it
    /// may publish anywhere, and nothing is checked).
    publish_check: Option<Box<PublishCache>>,
    /// The replies it may still publish outside its publish rules, when its identity
    /// has publish rules and `allow_responses` (one per request handed to it).
    responses: Option<Box<Responses>>,
    /// Its password is being checked off the loop ([`Core::poll_login`]): any frame
    /// before the answer is a protocol error.
    verifying: bool,
    /// While `verifying`: cleared when it closes, so that the checking thread skips
    /// its check (a flood of logins that disconnect at once left up to
    /// [`MAX_PENDING_LOGINS`] checks, ~17 ms of argon2 each, for nobody: logins were
    /// refused busy for a second after it stopped, hostile-input probe).
    login_wanted: Option<Arc<AtomicBool>>,
    /// It receives the multicast topics by multicast (HELLO offered MCAST and the
    /// router has streams): they are not sent over its connection ([`crate::mcast`]).
    mcast: bool,
    /// The user its verified TLS client certificate names (docs/security.md): its
    /// identity when the HELLO offers no login.
    cert_identity: Option<Arc<Identity>>,
    /// Cached topics its images may still examine (`image_scan_rate`).
    image_budget: TokenBucket,
    /// When an image put more than `egress_limit` unread bytes in its buffer: the
    /// deadline (`drain_timeout_ms` later) by which it must be back under the limit.
    /// Reading some of it does not extend the deadline; getting under the limit
    /// clears it.
    drain_by: Option<MonoNanos>,
    /// With `drain_by`: what is left unread of the bytes queued up to the end of the
    /// image (its unread bytes when it went over `egress_limit`, less what was written
    /// since). Answers queued behind an image that is being read meet the limit above
    /// this, so a PING or SUBSCRIBE pipelined after the image neither drops the image
    /// nor disconnects (hostile-input probe); the image is bounded by the cache.
    image_allow: usize,
    /// It is closing and its subscriptions are still being removed from the indexes
    /// ([`Core::teardown`]): its slot is not reused until they are.
    tearing_down: bool,
}

/// A closing (or closed) client's subscriptions still in the indexes, removed a few per
/// loop turn ([`TEARDOWN_PATTERNS_PER_TURN`]).
struct Teardown {
    slot: Slot,
    /// Its pattern set, taken whole when it began closing (moving the set is O(1)).
    patterns: std::iter::Peekable<hash_set::IntoIter<Arc<str>>>,
    /// The identity it was admitted as (`Some(None)`: anonymous), whose connection
    /// count its slot keeps until the teardown ends.
    user: Option<Option<Box<str>>>,
}

/// What an image that sent `messages` cached messages of `bytes` in all owes the scan
/// budget (`image_scan_rate`), in its unit (a cached topic examined, ~20 ns): one per
/// message encoded, one per [`IMAGE_BYTES_PER_UNIT`] bytes copied.
fn image_send_cost(messages: usize, bytes: usize) -> u64 {
    messages as u64 + (bytes / IMAGE_BYTES_PER_UNIT) as u64
}

/// Bytes of an image sent in about the time one cached topic is examined (~20 ns).
/// Measured: an image is copied, encoded and written at ~2 GB/s of the router's time
/// (four clients looping on a 65 MB image had the router send 0.9 GB/s using half a
/// core), so ~40 bytes cost a unit. It was 256, which let images take about 6x the
/// router time the budget meant (hostile-input pass, 2026-12-07: four such loops
/// held a PING probe's p99 at 15.7 ms).
const IMAGE_BYTES_PER_UNIT: usize = 32;

/// A full budget of cached topics to examine for images at `rate` per second: the
/// burst is one full scan of the largest cache, or a tenth of a second's rate if more.
fn image_budget(cfg: &Config, rate: u64, now: MonoNanos) -> TokenBucket {
    let burst = (cfg.cache_max_topics as u64).max(rate / 10);
    TokenBucket::full(rate, burst, now)
}

/// A request with reply topic `reply_to` is about to be handed to `c`: under
/// `allow_responses` it may publish one reply there ([`Responses`]). False when that
/// grant cannot be recorded (the responder owes replies to 1,024 reply topics or to
/// their byte bound, 1,024 replies on this one, or to 4 other requesters on it): the request is then not handed to `c` at all.
/// Handed over regardless, its reply went to the requesters already recorded on that
/// topic and never to this one (hostile-input pass: four connections that could read
/// a victim's inbox sent junk requests naming it, and took the victim's next reply
/// while the victim got nothing). Out of the routing loop's way.
#[inline(never)]
fn grant_response(
    c: &mut Client,
    reply_to: &str,
    requester: ClientId,
    slot: Slot,
    now: MonoNanos,
) -> bool {
    let Some(r) = c.responses.as_mut() else {
        return true;
    };
    match r.grant(reply_to, requester.0, slot.0, now.as_nanos()) {
        Grant::Recorded => true,
        Grant::Refused { first } => {
            if first {
                tracing::warn!(
                    client = c.id.0, name = c.name.as_str(), pending = r.pending(),
                    "allow_responses: replies owed to 1024 reply topics or their byte bound (or 1024 replies, or 4 other requesters, on one reply topic); further such requests are not handed to this responder until owed replies are published or expire"
                );
            }
            false
        }
    }
}

/// What [`Core::route`] did with a PUBLISH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Routed {
    /// Queued for at least one subscriber, or sent by multicast.
    Yes,
    /// No subscription matched (a request gets `NO_RESPONDERS`).
    Unmatched,
    /// A request that matched only responders which could not take its reply
    /// ([`grant_response`]): handed to no one but, at most, its requester's own
    /// subscription (the requester gets `BUSY`).
    GrantsRefused,
    /// A request handed to no one because its groups' looks ended at
    /// [`groups::MAX_SKIPPED`] members leaving (the requester gets `BUSY`).
    MembersLeaving,
}

/// Why [`Core::handle_accept`] refused a connection; the bytes to send before closing.
pub struct Refused(pub Vec<u8>);

/// The router's state. Single-threaded; owned by the event loop.
pub struct Core {
    cfg: Config,
    clients: Vec<Option<Client>>,
    free: Vec<u32>,
    live: usize,
    index: SubscriptionIndex,
    matched: Vec<Slot>,
    /// One copy of each pattern's text, shared by every client holding it (hostile-input
    /// probe: 1,000 clients of the same 10,000 patterns of 250 bytes held ~3.2 GB in
    /// copies). An entry goes when its last client lets go ([`Core::release_pattern`]),
    /// or, when a snapshot still held it then, at the next sweep.
    pattern_text: HashSet<Arc<str>>,
    /// `pattern_text`'s size after the last sweep.
    pattern_text_swept: usize,
    /// Shared subscriptions (`$share/GROUP/PATTERN`).
    groups: Groups,
    /// The last-value cache.
    cache: Cache,
    /// Cached topics all images together may still examine (`image_scan_rate_total`).
    image_budget: TokenBucket,
    dirty: Vec<Slot>,
    closing: Vec<Slot>,
    /// Closing clients' subscriptions still to remove, oldest client first
    /// ([`Core::poll_closing`] removes them a bounded number per turn).
    teardown: VecDeque<Teardown>,
    /// What this turn's teardown may still remove.
    teardown_budget: TeardownBudget,
    /// Where [`Core::refresh_pattern_views`] starts next.
    snapshot_cursor: usize,
    /// Patterns (and their levels) subscribed since the last [`Core::poll_closing`]:
    /// that turn's teardown may remove as many on top of its own budget, so removal
    /// keeps pace with any rate of subscribing (see [`Core::poll_closing`]).
    subscribed_this_turn: (usize, usize),
    /// Slots whose client is gone ([`Core::handle_closed`]) while its subscriptions are
    /// still being removed: not reused until they are, and counted towards
    /// `max_clients` (and their user's connection limit).
    held: usize,
    totals: Totals,
    /// Bytes every client's egress buffer holds allocated (the sum of their
    /// capacities), kept in step at each change: what `egress_memory_limit` bounds.
    egress_bytes: usize,
    /// [`Config::egress_share`], computed once.
    egress_share: usize,
    started_unix_ms: u64,
    started: MonoNanos,
    /// The last [`ClientId`] handed out.
    last_id: u64,
    /// No deadline is earlier than this (see [`Core::poll_timeout`]).
    next_deadline: Option<MonoNanos>,
    /// The last [`Core::handle_input`] stopped at [`SUBSCRIPTION_WORK_PER_READ`] or
    /// [`DELIVERY_WORK_PER_READ`].
    input_paused: bool,
    /// Routing work of the current [`Core::handle_input`] call: 1 per PUBLISH routed
    /// plus 1 per client it was matched to (see [`DELIVERY_WORK_PER_READ`]).
    delivery_work: u64,
    /// Where the router-out stamp of a STAMPS message comes from: the driver injects its
    /// clock ([`Core::set_stamp_clock`]); without one the stamp is the turn's `now`.
    stamp_clock: Option<fn() -> MonoNanos>,
    /// Whether the current [`Core::handle_input`] call's `now` was read after its bytes
    /// were ([`Core::set_input_clock_fresh`]); if not, the first STAMPS message of the
    /// call reads the stamp clock for its router-in stamp, and the call's later ones
    /// take that reading.
    input_clock: InputClock,
    /// Guaranteed messaging: queues, publishers, consumers.
    gm: Engine,
    /// Where guaranteed messages are persisted ([`NoSpool`] until the driver attaches one).
    spool: Box<dyn SpoolPort>,
    /// Wall-clock time at `started` (wall time = this + monotonic elapsed: message
    /// times, TTLs and retention need no clock read).
    started_wall: UtcNanos,
    gm_closing: Vec<(Slot, ErrorCode, String)>,
    /// The latest time passed in (for work triggered without a time, e.g. a close).
    latest: MonoNanos,
    last_reclaim: MonoNanos,
    reclaimed_below: u64,
    /// A checkpoint appended, not yet durable: (reclaim below, its first and last
    /// record). The segments it replaces go only once it is durable.
    reclaim_after: Option<(u64, u64, u64)>,
    /// Users, tokens and rules (`[auth]`), compiled.
    auth: Authenticator,
    /// Connections per identity (`None`: anonymous), for the per-user limits.
    connections_of: HashMap<Option<Box<str>>, usize>,
    /// Password checks go to the driver ([`Core::poll_login`]) instead of running here.
    async_logins: bool,
    /// Password checks not yet taken by the driver.
    logins_out: Vec<LoginRequest>,
    /// Password checks handed out and not yet answered (bounded by
    /// [`MAX_PENDING_LOGINS`] with `logins_out`).
    logins_in_flight: usize,
    /// Password checks queued or running per source address (at most
    /// [`MAX_PENDING_LOGINS_PER_SOURCE`] each).
    logins_by_source: HashMap<LoginSource, usize>,
    /// Logins refused busy: how many, and (count, time) when last logged (a flood is
    /// logged once a second at most, with the count).
    logins_busy: u64,
    logins_busy_logged: (u64, MonoNanos),
    /// Connections not yet logged in, oldest first (stale entries dropped lazily): at
    /// the connection limit the oldest is closed to admit a new one.
    pre_login: std::collections::VecDeque<(Slot, ClientId)>,
    /// Clients closed that way and not yet gone (they hold no place in `max_clients`).
    evicted: usize,
    /// The multicast streams (empty without `[[router.multicast]]`).
    mcast: crate::mcast::Multicast,
    /// The last two valid PUBLISH topics ([`Core::on_publish`]); boxed so that lending
    /// it out per message moves a pointer, not the memo.
    topic_memo: Option<Box<TopicMemo>>,
    /// The last STATS_REPLY document and until when it answers further requests
    /// ([`Core::on_stats_request`]).
    stats_shared: Option<(Arc<str>, MonoNanos)>,
}

/// Closing clients' subscriptions a loop turn removes from the indexes at most (and at
/// most [`TEARDOWN_LEVELS_PER_TURN`] levels of them): the rest wait for later turns, so
/// a client closing with many subscriptions cannot stall the others (docs/security.md,
/// "Closing a connection with many subscriptions").
///
/// A removal costs a fixed part (the pattern's text, hash-map and node bookkeeping) and
/// a part per level (a trie node walked, and freed when no other pattern uses it):
/// ~6 µs for a 10-level pattern in a release build (hostile-input probe: a client's
/// 10,000 such patterns, `max_subscriptions`, stalled every other client ~60 ms in
/// one call; 64 such clients closing together 2.7–3.7 s), so 64 cost ~0.4 ms a turn.
/// Measured with `examples/scale_costs.rs teardown` in an `opt-level = 1` test build:
/// a turn's median ~0.2 ms for 64 patterns of 10 levels (~3.2 µs each), ~30 µs for 64
/// of one level, ~0.15 ms for 12 of 50 levels; the whole 10,000 in one call, before,
/// 71–77 ms.
pub const TEARDOWN_PATTERNS_PER_TURN: usize = 64;

/// Pattern levels a loop turn's teardown removes at most (see
/// [`TEARDOWN_PATTERNS_PER_TURN`]): 64 patterns of 10 levels, or 5 of the longest (a
/// 250-byte pattern has at most 125 levels), whose per-level part costs about as much
/// as 64 patterns of 10 levels.
pub const TEARDOWN_LEVELS_PER_TURN: usize = 640;

/// Subscription work one [`Core::handle_input`] call does at most: SUBSCRIBE and
/// UNSUBSCRIBE frames, each counted as 1 + its pattern's levels. Beyond it the call
/// stops before the next such frame, leaves the rest of the input (whole frames)
/// unconsumed and says so ([`Core::input_paused`]); the driver hands it back next turn
/// before reading more from that client. A subscription change costs about as much as a
/// removal (see [`TEARDOWN_PATTERNS_PER_TURN`]; ~6 µs for 10 levels in release), so
/// without this one read buffer of them (256 KiB: ~6,000 frames) held the loop for tens
/// of ms: a client sending SUBSCRIBE/UNSUBSCRIBE pairs without pause took every other
/// client's PING from 53 µs to 17 ms (p50; 80 ms at worst) in a probe. With it, one
/// read's subscription work is about what a read buffer of publishes costs.
pub const SUBSCRIPTION_WORK_PER_READ: u64 = 640;

/// Routing work one [`Core::handle_input`] call does at most: 1 per PUBLISH plus 1 per
/// client it is matched to (each a copy into an egress buffer). Past it the call stops
/// after the PUBLISH that reached it and leaves the rest of the input (whole frames)
/// for the next turn, as [`SUBSCRIPTION_WORK_PER_READ`] does. The sender chooses how
/// much one read makes the router do: a read buffer of 11-byte PUBLISHes (~23,800) to
/// a topic with 300 subscribers was ~7 million copies in one call, and every other
/// client's PING waited hundreds of ms (p50 359 ms, hostile-input probe). 32,768 is
/// about 1 ms of routing (~30 ns a copy); a 1 → 1 stream of 100-byte messages (~2,000
/// frames a 256 KiB read, 2 units each) is still handled one read per call, a read of
/// the smallest PUBLISHes (~23,800) in two. Not lower: each pause costs a turn, whose writes to every
/// matched client cost more than the copies once a call is down to a few PUBLISHes
/// (4,096 with 300 subscribers: 3.6x fewer copies a second than 32,768's).
pub const DELIVERY_WORK_PER_READ: u64 = 32_768;

/// Spool bytes past which a router retaining no guaranteed message replaces its queue
/// and publisher records with a checkpoint, so the segments they filled can go (twice
/// the spool's default segment: the active segment is never deleted).
pub const UNPINNED_RECLAIM_BYTES: u64 = 128 << 20;

/// What the current turn's teardown may still remove.
#[derive(Debug, Clone, Copy)]
struct TeardownBudget {
    patterns: usize,
    levels: usize,
    /// Nothing taken yet this turn: any one pattern fits.
    fresh: bool,
}

impl TeardownBudget {
    /// A whole turn's.
    const TURN: TeardownBudget = TeardownBudget {
        patterns: TEARDOWN_PATTERNS_PER_TURN,
        levels: TEARDOWN_LEVELS_PER_TURN,
        fresh: true,
    };

    /// Takes the removal of a pattern of `levels` levels if the budget allows it. A
    /// whole turn's budget allows any one pattern, so every turn makes progress.
    fn take(&mut self, levels: usize) -> bool {
        if self.patterns == 0 || (levels > self.levels && !self.fresh) {
            return false;
        }
        self.fresh = false;
        self.patterns -= 1;
        self.levels = self.levels.saturating_sub(levels);
        true
    }
}

/// Queues a STATS_REPLY lists at most (the first by name; `queues_omitted` counts the
/// rest, `tickwire queue list` pages through all): the document's cost stays bounded
/// however many queues there are.
pub const STATS_MAX_QUEUES: usize = 1_000;

/// A STATS_REPLY document answers further requests (from any client) for this long per
/// byte it has: building it costs the loop ~3 ns per byte (1.6 ms for the 484 KB of
/// 1,000 queues, `scale_costs -- statsdoc`), so however many clients ask, the loop
/// spends ~2% of its time building them (a 484 KB document is shared for ~0.1 s, a
/// small router's 2 KB one for 0.4 ms).
const STATS_SHARE_NS_PER_BYTE: u64 = 200;

/// The longest a STATS_REPLY document is shared: how old a reply may be at most.
const STATS_SHARE_MAX_NS: u64 = 100_000_000;

/// How long a connection not yet logged in must have had to say HELLO (since its
/// accept, or the end of its TLS handshake) before a new connection at the connection
/// limit closes it: a client's HELLO follows its connect (or its handshake) at once, so
/// this covers a slow loop turn too (accepts are taken before the turn's reads).
pub const EVICT_BEFORE_LOGIN_AGE_NS: u64 = 100_000_000;

/// Connections not logged in that one eviction looks at, past those still in a TLS
/// handshake, at most.
const EVICT_LOOK_AHEAD: usize = 64;

/// Password logins waiting for their check at most; more are refused busy at once, so
/// a flood of logins costs the router no more than this much memory and queueing.
pub const MAX_PENDING_LOGINS: usize = 64;

/// Password logins from one source address (an IPv6 /64; a shared-memory client's
/// user) waiting for their check at most: one source flooding wrong passwords (~17 ms
/// of argon2 each) holds a quarter of the places, not all of them (hostile-input pass:
/// 66 connections from one address refused every other password login busy).
pub const MAX_PENDING_LOGINS_PER_SOURCE: usize = MAX_PENDING_LOGINS / 4;

/// Where password logins come from, for [`MAX_PENDING_LOGINS_PER_SOURCE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum LoginSource {
    /// An IPv4 address, or an IPv6 /64 (one host's or site's addresses).
    Ip(std::net::IpAddr),
    /// A shared-memory client's user id (when the kernel said).
    Local(Option<u32>),
}

impl LoginSource {
    fn of(peer: &Peer) -> LoginSource {
        match peer {
            Peer::Tcp(a) => LoginSource::Ip(match a.ip() {
                std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                    Some(v4) => std::net::IpAddr::V4(v4),
                    None => std::net::IpAddr::V6(std::net::Ipv6Addr::from(
                        u128::from(v6) & !((1u128 << 64) - 1),
                    )),
                },
                ip => ip,
            }),
            Peer::Shm { uid, .. } => LoginSource::Local(*uid),
        }
    }
}

/// Names of a client certificate that matches no user written in its log line.
const LOGGED_CERT_NAMES: usize = 8;

/// A password login for the driver to check off the event loop (argon2 takes
/// milliseconds): [`LoginRequest::run`] it anywhere, then hand the result back with
/// [`Core::handle_login_result`].
#[derive(Debug)]
pub struct LoginRequest {
    slot: Slot,
    client: ClientId,
    source: LoginSource,
    user: Box<str>,
    check: crate::auth::PasswordCheck,
    /// Cleared when the client closes before its check ran.
    wanted: Arc<AtomicBool>,
}

impl LoginRequest {
    /// Checks the password (milliseconds, 19 MiB of argon2 memory), unless the client
    /// has gone meanwhile: then it is answered busy unchecked, an answer nobody waits
    /// for.
    pub fn run(self) -> LoginResult {
        if !self.is_wanted() {
            return self.busy();
        }
        let result = self.check.run();
        LoginResult {
            slot: self.slot,
            client: self.client,
            source: self.source,
            user: self.user,
            result,
        }
    }

    /// Whether its client still waits for it (it has not closed).
    pub fn is_wanted(&self) -> bool {
        self.wanted.load(Ordering::Relaxed)
    }

    /// Refuses it unchecked (the checking thread is busy).
    pub fn busy(self) -> LoginResult {
        LoginResult {
            slot: self.slot,
            client: self.client,
            source: self.source,
            user: self.user,
            result: Err(LoginError::Busy),
        }
    }
}

/// The answer to a [`LoginRequest`].
#[derive(Debug)]
pub struct LoginResult {
    slot: Slot,
    client: ClientId,
    source: LoginSource,
    user: Box<str>,
    result: Result<Arc<Identity>, LoginError>,
}

/// The largest HELLO: header, version, reserved, capabilities and a 64-byte name. Before
/// the handshake the router buffers no more than this.
pub const MAX_HELLO_LEN: u32 = (frame::HEADER_LEN + 8 + frame::MAX_NAME_LEN) as u32;

const HELLO_FIRST: &str = "the first frame must be HELLO (see docs/protocol.md)";
const TLS_ON_PLAINTEXT: &str = "the first bytes are a TLS handshake: a TLS client on the \
     plaintext listener? (TLS clients connect to the router's --tls-listen address); the \
     first frame must be HELLO (see docs/protocol.md)";
const AUTH_NEXT: &str =
    "after a HELLO offering AUTH the next frame must be AUTH (see docs/protocol.md)";
const AUTH_WAIT: &str =
    "a frame arrived before the answer to AUTH: wait for WELCOME (see docs/protocol.md)";

/// What [`Core::handle_input`] asks of the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Bytes consumed; keep the rest and read more.
    Consumed(usize),
    /// The client is closing (error or CLOSE); stop reading from it.
    Closing,
}

impl Core {
    /// A core for `cfg` (assumed validated). `wall` is used only for display.
    pub fn new(cfg: Config, now: MonoNanos, wall: UtcNanos) -> Core {
        Core {
            latest: now,
            last_reclaim: now,
            stats_shared: None,
            reclaimed_below: 0,
            reclaim_after: None,
            clients: Vec::new(),
            free: Vec::new(),
            live: 0,
            index: SubscriptionIndex::new(),
            pattern_text: HashSet::new(),
            pattern_text_swept: 0,
            matched: Vec::with_capacity(1024),
            groups: Groups::default(),
            cache: Cache::new(
                &cfg.cache,
                CacheLimits {
                    depth: cfg.cache_depth,
                    max_topics: cfg.cache_max_topics,
                    max_bytes: cfg.cache_max_bytes,
                },
            ),
            dirty: Vec::with_capacity(1024),
            closing: Vec::new(),
            teardown: VecDeque::new(),
            teardown_budget: TeardownBudget::TURN,
            snapshot_cursor: 0,
            subscribed_this_turn: (0, 0),
            held: 0,
            totals: Totals::default(),
            egress_bytes: 0,
            egress_share: cfg.egress_share(),
            started_unix_ms: wall.as_nanos() / 1_000_000,
            started: now,
            last_id: 0,
            next_deadline: None,
            input_paused: false,
            delivery_work: 0,
            stamp_clock: None,
            input_clock: InputClock::Fresh,
            image_budget: image_budget(&cfg, cfg.image_scan_rate_total, now),
            gm: Engine::new(gm::GmConfig {
                publish_window: cfg.publish_window,
                retain_bytes: cfg.retain_bytes,
                retain_ms: cfg.retain_ms,
                max_stored_bytes: cfg.max_stored_bytes,
                max_frame: cfg.max_frame,
                max_index_nodes: cfg.max_queue_index_nodes,
                max_match_work: cfg.max_match_work,
                max_entries: cfg.max_queue_entries,
                max_in_flight_bytes: (cfg.egress_limit / 2) as u64,
                ..gm::GmConfig::default()
            }),
            spool: Box::new(NoSpool),
            started_wall: wall,
            gm_closing: Vec::new(),
            // `Config::validate` compiled it already; should it fail now, nobody gets in.
            auth: cfg.authenticator().unwrap_or_else(|e| {
                tracing::error!(error = %e, "refusing every client");
                Authenticator::closed()
            }),
            connections_of: HashMap::new(),
            async_logins: false,
            logins_out: Vec::new(),
            logins_in_flight: 0,
            logins_by_source: HashMap::new(),
            logins_busy: 0,
            logins_busy_logged: (0, MonoNanos(0)),
            pre_login: std::collections::VecDeque::new(),
            evicted: 0,
            mcast: crate::mcast::Multicast::new(&cfg.multicast, now, wall),
            topic_memo: Some(Box::default()),
            cfg,
        }
    }

    /// The multicast streams, for the driver to send, read NAKs and run timers.
    pub fn multicast_mut(&mut self) -> &mut crate::mcast::Multicast {
        &mut self.mcast
    }

    /// The guaranteed-messaging engine, for recovery at start-up (the driver replays the
    /// spool into it, then calls [`Engine::finish_recovery`]).
    pub fn gm_mut(&mut self) -> &mut Engine {
        &mut self.gm
    }

    /// Attaches the spool guaranteed messages are written to.
    pub fn attach_spool(&mut self, spool: Box<dyn SpoolPort>) {
        self.spool = spool;
    }

    fn wall(&self, now: MonoNanos) -> UtcNanos {
        UtcNanos(self.started_wall.as_nanos() + now.saturating_sub(self.started))
    }

    /// Hands this turn's spool records to the storage thread (once per loop turn).
    pub fn flush_spool(&mut self) {
        self.spool.flush();
    }

    /// Whether queue creates that start in the past are still filling from the
    /// retained messages (at every timer tick): the driver then sleeps no longer than
    /// one timer period.
    pub fn is_filling(&self) -> bool {
        self.gm.is_filling()
    }

    /// Whether `id` carries only guaranteed traffic: a guaranteed publisher or
    /// consumer that has never published a direct message. The driver reads such
    /// clients after it has written out the direct traffic of the turn, so storing,
    /// acknowledging and delivering guaranteed messages never delays a direct message
    /// read in the same turn. A client that also publishes direct messages is read
    /// with the others.
    pub fn is_background(&self, id: Slot) -> bool {
        self.clients
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .is_some_and(|c| !c.direct_publisher && c.phase == Phase::Open)
            && self.gm.is_guaranteed_client(id)
    }

    /// Takes the spool's progress: acknowledges publishes that became durable, NACKs
    /// failed ones, delivers what became deliverable.
    pub fn handle_spool(&mut self, now: MonoNanos) {
        let mut progressed = false;
        while let Some(p) = self.spool.poll_progress() {
            match p {
                Progress::Durable(lsn) => {
                    progressed = true;
                    self.gm.handle_durable(now, lsn);
                }
                Progress::Failed { first, last, why } => {
                    tracing::error!(first, last, %why, "spool write failed; those guaranteed publishes are NACKed");
                    // A checkpoint not written whole replaces nothing: the next tick
                    // writes another.
                    if self
                        .reclaim_after
                        .is_some_and(|(_, a, b)| a <= last && first <= b)
                    {
                        self.reclaim_after = None;
                    }
                    self.gm.handle_failed(now, first, last, &why);
                }
            }
        }
        if progressed {
            self.gm.rewrite_failed_forgets(&mut *self.spool);
        }
        self.gm_output();
    }

    /// Now and then (every 10 s at most): writes again the held messages that pin old
    /// segments ([`crate::gm::Engine::relocate`], bounded per tick), then lets the
    /// spool delete segments nothing retained needs, after appending a checkpoint
    /// (queue definitions, publisher marks) so the deleted segments' definitions
    /// survive. The segments go only once that checkpoint is durable (checked at every
    /// call): deleting them as soon as it was appended let a crash in between lose both
    /// the old definitions and the new ones.
    pub fn maybe_reclaim(&mut self, now: MonoNanos) {
        if !self.spool.enabled() {
            return;
        }
        if let Some((below, _, last)) = self.reclaim_after {
            if self.gm.durable_lsn() >= last {
                self.spool.reclaim(below);
                self.reclaimed_below = below;
                self.reclaim_after = None;
            }
        }
        if now.saturating_sub(self.last_reclaim) < 10_000_000_000 {
            return;
        }
        self.last_reclaim = now;
        let disk = self.spool.bytes_on_disk();
        self.gm.relocate(&mut *self.spool, disk);
        if self.reclaim_after.is_some() {
            return;
        }
        let mut below = self.gm.reclaim_below();
        // Nothing retained and nothing pending: what is needed of the spool is the
        // queue and publisher records and the next message id, which a checkpoint
        // replaces whole (its first record carries the id on through a restart). Done
        // once the spool takes more than UNPINNED_RECLAIM_BYTES (hostile-input pass: a
        // client churning queue creates and deletes left 315 MB that nothing
        // reclaimed while no guaranteed message was retained).
        let unpinned = below == u64::MAX;
        let durable = self.gm.durable_lsn();
        if unpinned {
            if disk < UNPINNED_RECLAIM_BYTES || durable <= self.reclaimed_below {
                return;
            }
        } else if below <= self.reclaimed_below {
            return;
        }
        let ck = self.gm.checkpoint(&mut *self.spool);
        if !ck.complete {
            return;
        }
        match ck.records {
            Some((first, last)) => {
                if unpinned {
                    below = first;
                }
                self.reclaim_after = Some((below, first, last));
            }
            None => {
                if unpinned {
                    // No queue and no publisher left: every durable record is obsolete.
                    below = durable + 1;
                }
                self.spool.reclaim(below);
                self.reclaimed_below = below;
            }
        }
    }

    /// Moves the engine's frames into the clients' egress buffers.
    fn gm_output(&mut self) {
        if !self.gm.has_output() && self.gm_closing.is_empty() {
            return;
        }
        let (out, ranges) = self.gm.take_output();
        for &(slot, a, b) in &ranges {
            self.control(slot, |e| e.extend_from_slice(&out[a..b]));
        }
        self.gm.return_output(out, ranges);
        while let Some(f) = self.gm.poll_fail() {
            self.gm_closing.push(f);
        }
        while let Some((slot, code, text)) = self.gm_closing.pop() {
            self.fail(slot, code, &text);
        }
    }

    fn gm_result(&mut self, id: Slot, r: Result<(), Reject>) -> bool {
        self.gm_output();
        match r {
            Ok(()) => true,
            Err(rej) if rej.fatal => {
                self.fail(id, rej.code, &rej.text);
                false
            }
            Err(rej) => {
                let Reject {
                    request_id,
                    code,
                    text,
                    ..
                } = rej;
                self.control(id, |b| {
                    frame::encode_error(b, request_id, code, false, &text)
                });
                true
            }
        }
    }

    fn gm_unavailable(&mut self, id: Slot, request_id: u32) -> bool {
        if self.spool.enabled() {
            return false;
        }
        self.control(id, |b| {
            frame::encode_error(
                b,
                request_id,
                ErrorCode::SPOOL_UNAVAILABLE,
                false,
                "guaranteed messaging is off: this router runs without a spool (see tickwire router --help, --data-dir)",
            )
        });
        true
    }

    /// Sets the clock read for the router-out stamp of each message that carries STAMPS
    /// (only those: other messages never cost a clock read). The core never names a clock
    /// itself; the driver passes `MonoNanos::now`, tests a fake.
    pub fn set_stamp_clock(&mut self, clock: fn() -> MonoNanos) {
        self.stamp_clock = Some(clock);
    }

    /// Says whether the `now` of the next [`Core::handle_input`] call was read after
    /// the bytes it is given (a driver that reuses one reading taken before its
    /// first read of a turn passes `false` for that read). A STAMPS message's router-in
    /// stamp must not precede its arrival: with the turn's reading, a streaming
    /// publisher's messages showed the router before their send (new-user pass:
    /// `bench md-replay`'s FH→router hop at 0.00 µs; a test counted 54 of 1,000,000).
    /// Only STAMPS messages ever cost the extra clock read.
    pub fn set_input_clock_fresh(&mut self, fresh: bool) {
        self.input_clock = if fresh {
            InputClock::Fresh
        } else {
            InputClock::Stale
        };
    }

    /// The router-in time of a STAMPS message read at `now` (see
    /// [`Core::set_input_clock_fresh`]).
    #[inline]
    fn stamped_now(&mut self, now: MonoNanos) -> MonoNanos {
        match self.input_clock {
            InputClock::Fresh => now,
            InputClock::Read(t) => t,
            InputClock::Stale => {
                let t = self.stamp_clock.map_or(now, |read| read()).max(now);
                self.input_clock = InputClock::Read(t);
                t
            }
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Registers a new connection, or refuses it at the connection limit. A slot whose
    /// client is gone but whose subscriptions are still being removed counts towards the
    /// limit (see [`Core::poll_closing`]).
    pub fn handle_accept(
        &mut self,
        addr: impl Into<Peer>,
        now: MonoNanos,
        wall: UtcNanos,
    ) -> Result<Slot, Refused> {
        let addr = addr.into();
        self.drop_stale_pre_login();
        if self.live - self.evicted + self.held >= self.cfg.max_clients
            && !self.evict_before_login(now)
        {
            self.totals.refused += 1;
            let mut b = Vec::new();
            let text = if self.held == 0 {
                format!(
                    "router is at its connection limit ({})",
                    tickwire_rt::text::count(self.cfg.max_clients as u64, "client", "clients")
                )
            } else {
                format!(
                    "router is at its connection limit ({}, of which {} closed and \
                     still having their subscriptions removed); try again shortly",
                    tickwire_rt::text::count(self.cfg.max_clients as u64, "client", "clients"),
                    self.held
                )
            };
            frame::encode_error(&mut b, 0, ErrorCode::TOO_MANY_CLIENTS, true, &text);
            return Err(Refused(b));
        }
        self.last_id += 1;
        let client = Client {
            id: ClientId(self.last_id),
            phase: Phase::Handshake,
            name: String::new(),
            addr,
            connected_at: now,
            connected_unix_ms: wall.as_nanos() / 1_000_000,
            frame_started: None,
            patterns: HashSet::new(),
            patterns_view: None,
            patterns_stale: true,
            levels: 0,
            shared: 0,
            egress: Egress::default(),
            dirty: false,
            discarding: false,
            counters: ClientCounters::default(),
            close_reason: None,
            stats_due: None,
            list_due: None,
            direct_publisher: false,
            identity: None,
            publish_check: None,
            responses: None,
            verifying: false,
            login_wanted: None,
            mcast: false,
            cert_identity: None,
            image_budget: image_budget(&self.cfg, self.cfg.image_scan_rate, now),
            drain_by: None,
            image_allow: 0,
            tearing_down: false,
            evicted: false,
            login_clock: Some(now),
        };
        let cid = client.id;
        let id = match self.free.pop() {
            Some(i) => {
                self.clients[i as usize] = Some(client);
                i
            }
            None => {
                self.clients.push(Some(client));
                (self.clients.len() - 1) as u32
            }
        };
        self.live += 1;
        self.totals.connections += 1;
        self.pre_login.push_back((Slot(id), cid));
        self.lower_deadline(now.add_nanos(self.cfg.handshake_timeout_ms * 1_000_000));
        Ok(Slot(id))
    }

    /// A TLS connection's handshake has begun: until it ends
    /// ([`Core::handle_tls_established`]) the connection is not closed to admit a
    /// newcomer at the connection limit (its HELLO cannot come before; review: with
    /// the age counted from the accept, a client 50 ms away was always "silent").
    pub fn handle_tls_handshaking(&mut self, id: Slot) {
        if let Some(c) = self.client_mut(id) {
            c.login_clock = None;
        }
    }

    /// A TLS connection's handshake ended at `now`: its time to say HELLO starts.
    pub fn handle_tls_established(&mut self, id: Slot, now: MonoNanos) {
        if let Some(c) = self.client_mut(id) {
            c.login_clock = Some(now);
        }
    }

    /// Whether the client in `slot` is `cid` and has not logged in: no HELLO yet, or no
    /// AUTH after a HELLO that offered it (one whose password is being checked waits
    /// for the router, not for the peer).
    fn waits_to_log_in(&self, slot: Slot, cid: ClientId) -> Option<&Client> {
        self.clients
            .get(slot.0 as usize)
            .and_then(Option::as_ref)
            .filter(|c| {
                c.id == cid
                    && (c.phase == Phase::Handshake || (c.phase == Phase::Login && !c.verifying))
            })
    }

    /// Drops the entries of [`Core::pre_login`] at its front that logged in or went.
    fn drop_stale_pre_login(&mut self) {
        while let Some(&(slot, cid)) = self.pre_login.front() {
            if self.waits_to_log_in(slot, cid).is_some() {
                return;
            }
            self.pre_login.pop_front();
        }
        // Empty again after a flood: its memory back (review: it never shrank).
        if self.pre_login.capacity() > 4096 {
            self.pre_login.shrink_to(1024);
        }
    }

    /// At the connection limit: closes the oldest connection that has not logged in,
    /// if it is at least [`EVICT_BEFORE_LOGIN_AGE_NS`] old, so the new one is admitted
    /// (hostile-input pass: ~1,100 connections that never sent HELLO, reopened as the
    /// router closed them, held `max_clients` and refused 20 of 28 real logins). Oldest
    /// first: a new connection has until every older one is gone to log in.
    fn evict_before_login(&mut self, now: MonoNanos) -> bool {
        self.drop_stale_pre_login();
        // The oldest whose time to say HELLO has run that long: TLS connections still
        // in their handshake are passed over, a bounded number of entries looked at.
        let mut found = None;
        for (at, &(slot, cid)) in self.pre_login.iter().enumerate().take(EVICT_LOOK_AHEAD) {
            let Some(c) = self.waits_to_log_in(slot, cid) else {
                continue;
            };
            match c.login_clock {
                Some(t) if now.saturating_sub(t) >= EVICT_BEFORE_LOGIN_AGE_NS => {
                    found = Some((at, slot, now.saturating_sub(c.connected_at)));
                    break;
                }
                // Too young, or still in a TLS handshake.
                _ => {}
            }
        }
        let Some((at, slot, age)) = found else {
            return false;
        };
        self.pre_login.remove(at);
        if let Some(c) = self.client_mut(slot) {
            c.evicted = true;
        }
        self.evicted += 1;
        self.totals.evicted_before_login += 1;
        let text = format!(
            "the router is at its connection limit and this connection had not logged in \
             after {} ms: closed to admit a newer one",
            age / 1_000_000
        );
        // Counted as evicted, not as an error disconnect: the connection did nothing
        // wrong but wait (review: a flood of silent connections read as errors).
        self.fail_counted(slot, ErrorCode::TOO_MANY_CLIENTS, &text, false);
        true
    }

    /// Refuses a connection the driver could accept only by giving up its reserve file
    /// descriptor (the process is at its descriptor limit): the same fatal ERROR
    /// `TOO_MANY_CLIENTS` as at `max_clients`, with a text saying why.
    pub fn refuse_out_of_descriptors(&mut self) -> Refused {
        self.totals.refused += 1;
        let mut b = Vec::new();
        frame::encode_error(
            &mut b,
            0,
            ErrorCode::TOO_MANY_CLIENTS,
            true,
            "router is out of file descriptors (RLIMIT_NOFILE); try again later",
        );
        Refused(b)
    }

    /// Counts a TLS connection closed at accept by the driver's per-source handshake
    /// rate (`tls_handshake_rate`).
    pub fn note_tls_throttled(&mut self) {
        self.totals.tls_throttled += 1;
    }

    /// Number of connected clients.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Feeds the bytes buffered for client `id` at time `now`: `input` is everything
    /// not consumed by earlier calls, of which the last `fresh` bytes were just read
    /// (only those are counted in `bytes_in`).
    ///
    /// A call does at most [`SUBSCRIPTION_WORK_PER_READ`] of subscription work and
    /// about [`DELIVERY_WORK_PER_READ`] of routing: past either, it returns (before the
    /// next SUBSCRIBE or UNSUBSCRIBE, after the PUBLISH that reached the bound) with the
    /// rest unconsumed and [`Core::input_paused`] true; call again (with what is left,
    /// and whatever arrived since) on a later turn before reading more.
    ///
    /// `now` is taken as read after the bytes unless [`Core::set_input_clock_fresh`]
    /// said otherwise for this call (which holds for this call only).
    pub fn handle_input(&mut self, id: Slot, now: MonoNanos, input: &[u8], fresh: usize) -> Input {
        let r = self.handle_input_at(id, now, input, fresh);
        self.input_clock = InputClock::Fresh;
        r
    }

    /// [`Core::handle_input`] under the input clock the driver set.
    #[inline]
    fn handle_input_at(&mut self, id: Slot, now: MonoNanos, input: &[u8], fresh: usize) -> Input {
        self.latest = self.latest.max(now);
        self.input_paused = false;
        self.delivery_work = 0;
        let mut subscription_work = 0u64;
        let mut used = 0;
        let fresh = fresh.min(input.len()) as u64;
        match self.client_mut(id) {
            Some(c) if c.phase != Phase::Closing => {
                c.counters.bytes_in += fresh;
            }
            _ => return Input::Closing,
        }
        self.totals.bytes_in += fresh;
        loop {
            let rest = &input[used..];
            if rest.is_empty() {
                // Everything read was whole frames (a message per read, the usual
                // case): nothing left to look at or decode.
                self.note_partial(id, now, used, input.len());
                return Input::Consumed(used);
            }
            // One look at the client per frame: its phase and whether an AUTH waits.
            let (phase, verifying) = match self.clients.get(id.0 as usize).and_then(Option::as_ref)
            {
                Some(c) => (Some(c.phase), c.verifying),
                None => (None, false),
            };
            if verifying && !rest.is_empty() {
                // Nothing may follow AUTH before its answer: not buffered, refused.
                self.fail(id, ErrorCode::HANDSHAKE, AUTH_WAIT);
                return Input::Closing;
            }
            let expected = match phase {
                Some(Phase::Handshake) => Some((frame::Kind::Hello, HELLO_FIRST)),
                Some(Phase::Login) => Some((frame::Kind::Auth, AUTH_NEXT)),
                _ => None,
            };
            if let Some((kind, text)) = expected {
                // A TLS record (handshake, version 3.x) where HELLO belongs: a TLS client
                // on the plaintext listener, which the log says (new-user pass: "the
                // first frame must be HELLO" did not point at the port).
                if phase == Some(Phase::Handshake) && rest.starts_with(&[0x16, 0x03]) {
                    self.fail(id, ErrorCode::HANDSHAKE, TLS_ON_PLAINTEXT);
                    return Input::Closing;
                }
                if rest.len() > 4 && rest[4] != kind as u8 {
                    // Known from the header: no need to buffer the body of a frame that
                    // must be refused anyway.
                    self.fail(id, ErrorCode::HANDSHAKE, text);
                    return Input::Closing;
                }
            }
            let limit = self.frame_limit_in(phase);
            // The data path's common frame, a PUBLISH without flags from an open client,
            // is read in place: `plain_publish` answers as `decode` does (property-tested
            // in the wire crate), without its general path.
            let plain = match phase {
                Some(Phase::Open) => frame::plain_publish(rest, limit),
                _ => None,
            };
            let decoded = match plain {
                Some((n, topic, payload)) => {
                    let m = frame::Msg {
                        flags: 0,
                        seq: None,
                        discarded: 0,
                        stamps: None,
                        reply: None,
                        cached: None,
                        topic,
                        payload,
                    };
                    Ok(Some((Frame::Publish(m), n)))
                }
                None => frame::decode(rest, limit),
            };
            match decoded {
                // The data path: a PUBLISH from an open client is handled in place
                // (bound by reference: moving the frame out is a 144-byte copy per
                // message).
                Ok(Some((Frame::Publish(ref m), n))) if phase == Some(Phase::Open) => {
                    let raw = &input[used..used + n];
                    used += n;
                    if !self.publish_frame(id, now, m, raw) {
                        return Input::Closing;
                    }
                    if self.delivery_work >= DELIVERY_WORK_PER_READ && used < input.len() {
                        // The rest waits for the next turn: the other clients first.
                        // A frame that was unfinished before this read is whole now:
                        // its stall deadline must not outlive it.
                        self.input_paused = true;
                        self.note_partial(id, now, used, input.len());
                        return Input::Consumed(used);
                    }
                }
                Ok(Some((f, n))) => {
                    // Subscription changes: 1 + the pattern's levels each, at most
                    // SUBSCRIPTION_WORK_PER_READ a call (checked off the PUBLISH path).
                    if let Frame::Subscribe { pattern, .. } | Frame::Unsubscribe { pattern, .. } = f
                    {
                        if subscription_work >= SUBSCRIPTION_WORK_PER_READ {
                            // The rest waits for the next turn: the other clients first.
                            self.input_paused = true;
                            self.note_partial(id, now, used, input.len());
                            return Input::Consumed(used);
                        }
                        let levels = 1 + pattern.iter().filter(|&&b| b == b'/').count();
                        subscription_work += 1 + levels as u64;
                        if matches!(f, Frame::Subscribe { .. }) {
                            self.subscribed_this_turn.0 += 1;
                            self.subscribed_this_turn.1 += levels;
                        }
                    }
                    let raw = &input[used..used + n];
                    used += n;
                    if !self.on_frame(id, now, f, raw) {
                        return Input::Closing;
                    }
                }
                Ok(None) => {
                    self.note_partial(id, now, used, input.len());
                    return Input::Consumed(used);
                }
                Err(e) => {
                    self.fail(id, e.code(), &e.to_string());
                    return Input::Closing;
                }
            }
        }
    }

    /// Whether the last [`Core::handle_input`] stopped at its subscription or routing
    /// work bound ([`SUBSCRIPTION_WORK_PER_READ`], [`DELIVERY_WORK_PER_READ`]) with
    /// whole frames left unconsumed: the driver calls it again with them on the next
    /// turn, before reading more.
    pub fn input_paused(&self) -> bool {
        self.input_paused
    }

    /// The largest frame client `id` may send now: a HELLO before the handshake,
    /// `max_frame` after. The driver grows the read buffer no further than this.
    pub fn frame_limit(&self, id: Slot) -> u32 {
        self.frame_limit_in(self.phase(id))
    }

    /// [`Core::frame_limit`] of a client in `phase`.
    #[inline]
    fn frame_limit_in(&self, phase: Option<Phase>) -> u32 {
        match phase {
            Some(Phase::Handshake) => MAX_HELLO_LEN.min(self.cfg.max_frame),
            Some(Phase::Login) => frame::MAX_AUTH_LEN as u32,
            _ => self.cfg.max_frame,
        }
    }

    /// Starts (or keeps, or ends) the completion deadline of the unfinished frame.
    fn note_partial(&mut self, id: Slot, now: MonoNanos, used: usize, len: usize) {
        let stall = self.cfg.stall_timeout_ms * 1_000_000;
        let Some(c) = self.client_mut(id) else {
            return;
        };
        if used == len {
            c.frame_started = None;
        } else if used > 0 || c.frame_started.is_none() {
            // A new frame began in these bytes; one that was already unfinished keeps
            // its start, so a trickle of bytes does not extend its deadline.
            c.frame_started = Some(now);
            self.lower_deadline(now.add_nanos(stall));
        }
    }

    fn lower_deadline(&mut self, at: MonoNanos) {
        if self.next_deadline.is_none_or(|d| at < d) {
            self.next_deadline = Some(at);
        }
    }

    /// Handles one frame; false when the client is now closing.
    #[inline]
    fn on_frame(&mut self, id: Slot, now: MonoNanos, f: Frame<'_>, raw: &[u8]) -> bool {
        let Some(c) = self.client_mut(id) else {
            return false;
        };
        match (c.phase, f) {
            (
                Phase::Handshake,
                Frame::Hello {
                    version,
                    capabilities,
                    name,
                },
            ) => return self.on_hello(id, version, capabilities, name),
            (Phase::Handshake, _) => {
                self.fail(id, ErrorCode::HANDSHAKE, HELLO_FIRST);
                return false;
            }
            (Phase::Login, Frame::Auth(a))
                if self.async_logins && matches!(a.method, frame::AuthMethod::Password) =>
            {
                return self.queue_login(id, a.user, a.secret);
            }
            (Phase::Login, Frame::Auth(a)) => {
                let login = self.auth.login(a.method, a.user, a.secret);
                return self.admit(id, login, Some(a.user));
            }
            (Phase::Login, _) => {
                self.fail(id, ErrorCode::HANDSHAKE, AUTH_NEXT);
                return false;
            }
            _ => {}
        }
        match f {
            Frame::Publish(m) => self.publish_frame(id, now, &m, raw),
            Frame::PubOpen {
                request_id,
                options,
                name,
            } => {
                if self.gm_unavailable(id, request_id) {
                    return true;
                }
                if let Some(at) = name.chars().position(char::is_control) {
                    // Quoted once (`{:?}` escapes): escape_debug first showed "ev\\nil".
                    let text = format!(
                        "publisher identity {name:?}: its character {} (counting from 1) is a \
                         control character",
                        at + 1
                    );
                    self.control(id, |b| {
                        frame::encode_error(b, request_id, ErrorCode::INVALID_REQUEST, false, &text)
                    });
                    return true;
                }
                // A logged-in user's identities are its own: the same name opened by
                // another user is another identity, so no user can take over (or
                // resend as) another's publisher. The separator is a control
                // character, which neither an identity (above) nor a user name (the
                // [auth] table's check) contains.
                let owned;
                let key = match self.client_user(id) {
                    Some(user) => {
                        owned = format!("{user}{IDENTITY_OWNER_SEP}{name}");
                        owned.as_str()
                    }
                    None => name,
                };
                let r = self
                    .gm
                    .handle_pub_open(&mut *self.spool, id, request_id, options, key);
                self.gm_result(id, r)
            }
            Frame::QueueRequest {
                request_id,
                op,
                arg,
            } => {
                if self.gm_unavailable(id, request_id) {
                    return true;
                }
                if let Err(text) = self.queue_request_allowed(id, op, arg) {
                    self.deny(id, request_id, &text);
                    return true;
                }
                // A LIST answer is up to a frame of JSON built from every queue: one
                // unread at a time per client, as for STATS.
                let list = op == QueueOp::List;
                if list && self.unread_answer(id, |c| c.list_due) {
                    self.control(id, |b| {
                        frame::encode_error(
                            b,
                            request_id,
                            ErrorCode::BUSY,
                            false,
                            "the previous queue list is still unread; read it, then ask again",
                        )
                    });
                    return true;
                }
                let r = self
                    .gm
                    .handle_queue_request(&mut *self.spool, id, request_id, op, arg);
                let open = self.gm_result(id, r);
                if let (true, Some(c)) = (list, self.client_mut(id)) {
                    c.list_due = Some(c.counters.bytes_out + c.egress.pending() as u64);
                }
                open
            }
            Frame::Bind {
                request_id,
                window,
                start,
                queue,
            } => {
                if self.gm_unavailable(id, request_id) {
                    return true;
                }
                let subscriptions = self.gm.queue_subscriptions(queue);
                let any_topic = self.gm.takes_dead_letters(queue);
                if let Err(text) = self.check(id, |p| p.may_bind(queue, subscriptions, any_topic)) {
                    self.deny(id, request_id, &text);
                    return true;
                }
                let r = self
                    .gm
                    .handle_bind(now, id, request_id, window, start, queue);
                self.gm_result(id, r)
            }
            Frame::ConsumerAck {
                binding,
                first,
                last,
            } => {
                let r =
                    self.gm
                        .handle_consumer_ack(&mut *self.spool, now, id, binding, first, last);
                self.gm_result(id, r)
            }
            Frame::ConsumerNack {
                binding,
                action,
                msg_id,
            } => {
                let r = self.gm.handle_consumer_nack(
                    &mut *self.spool,
                    now,
                    id,
                    binding,
                    action,
                    msg_id,
                );
                self.gm_result(id, r)
            }
            Frame::Unbind {
                request_id,
                binding,
            } => {
                let r = self
                    .gm
                    .handle_unbind(&mut *self.spool, now, id, request_id, binding);
                self.gm_result(id, r)
            }
            Frame::Subscribe {
                request_id,
                pattern,
                image: Image::None,
            } => {
                self.on_subscribe(id, request_id, pattern, true);
                true
            }
            Frame::Subscribe {
                request_id,
                pattern,
                image,
            } => {
                self.on_image(id, now, request_id, pattern, image);
                true
            }
            Frame::Unsubscribe {
                request_id,
                pattern,
            } => {
                self.on_subscribe(id, request_id, pattern, false);
                true
            }
            Frame::Ping(token) => {
                self.control(id, |b| frame::encode_pong(b, token));
                true
            }
            Frame::Pong(_) => true,
            Frame::StatsRequest { request_id } => {
                self.on_stats_request(id, now, request_id);
                true
            }
            Frame::Close { .. } => {
                self.close(id, ErrorCode::NORMAL, "closed at the client's request");
                false
            }
            Frame::Hello { .. } => {
                self.fail(id, ErrorCode::HANDSHAKE, "HELLO sent twice");
                false
            }
            Frame::Auth(_) => {
                self.fail(
                    id,
                    ErrorCode::HANDSHAKE,
                    "AUTH is only sent right after a HELLO offering it",
                );
                false
            }
            _ => {
                self.fail(
                    id,
                    ErrorCode::UNEXPECTED_KIND,
                    "frame kind is only sent by routers",
                );
                false
            }
        }
    }

    fn on_hello(&mut self, id: Slot, version: u16, capabilities: u32, name: &str) -> bool {
        if version != PROTOCOL_VERSION {
            let text = format!(
                "protocol version {version} is not supported; this router speaks version {PROTOCOL_VERSION}"
            );
            self.fail(id, ErrorCode::UNSUPPORTED_VERSION, &text);
            return false;
        }
        let mcast = capabilities & caps::MCAST != 0 && !self.mcast.is_empty();
        let Some(c) = self.client_mut(id) else {
            return false;
        };
        c.mcast = mcast;
        c.name = if name.is_empty() {
            format!("client-{}", c.id)
        } else {
            name.to_string()
        };

        if capabilities & caps::AUTH != 0 {
            // The AUTH frame comes next (the client sends it without waiting).
            c.phase = Phase::Login;
            return true;
        }
        let identity = match c.cert_identity.take() {
            Some(user) => Ok(user),
            None => self.auth.anonymous(),
        };
        self.admit(id, identity, None)
    }

    /// The names of client `id`'s verified TLS certificate (the driver reports them
    /// once, after the TLS handshake and before any frame): the user whose `cert_name`
    /// is among them becomes the client's identity unless its HELLO logs in otherwise.
    /// Names that match no user change nothing (logged).
    pub fn handle_peer_cert(&mut self, id: Slot, names: &[String]) {
        let found = self.auth.cert_user(names);
        let Some(c) = self.client_mut(id) else {
            return;
        };
        match &found {
            Some(user) => {
                tracing::info!(client = c.id.0, addr = %c.addr, user = user.name(), "TLS client certificate identifies the user")
            }
            None => {
                // The first few names, each cut short: a certificate can carry
                // thousands (a 36 KB log line per connection, hostile-input pass).
                let shown: Vec<String> = names
                    .iter()
                    .take(LOGGED_CERT_NAMES)
                    .map(|n| n.chars().take(80).collect())
                    .collect();
                let more = names.len().saturating_sub(LOGGED_CERT_NAMES);
                tracing::info!(client = c.id.0, addr = %c.addr, names = ?shown, more_names = more, "TLS client certificate names no user: the client logs in or is anonymous")
            }
        }
        c.cert_identity = found;
    }

    /// Ends the handshake with a login's outcome: WELCOME, or fatal ERROR AUTH_FAILED
    /// (bad credentials, or the identity at its connection limit), counted and logged
    /// with the user name, never the secret.
    /// Hands a password check to the driver, or refuses it busy past
    /// [`MAX_PENDING_LOGINS`].
    fn queue_login(&mut self, id: Slot, user: &str, secret: &[u8]) -> bool {
        if self.logins_out.len() + self.logins_in_flight >= MAX_PENDING_LOGINS {
            return self.admit(id, Err(LoginError::Busy), Some(user));
        }
        let Some(source) = self
            .clients
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .map(|c| LoginSource::of(&c.addr))
        else {
            return false;
        };
        let pending = self.logins_by_source.entry(source).or_default();
        if *pending >= MAX_PENDING_LOGINS_PER_SOURCE {
            return self.admit(id, Err(LoginError::SourceBusy), Some(user));
        }
        *pending += 1;
        let check = self.auth.password_check(user, secret);
        let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return false;
        };
        c.verifying = true;
        let wanted = Arc::new(AtomicBool::new(true));
        c.login_wanted = Some(wanted.clone());
        let client = c.id;
        self.logins_out.push(LoginRequest {
            slot: id,
            client,
            source,
            user: user.into(),
            check,
            wanted,
        });
        true
    }

    /// Makes password logins asynchronous: the driver takes each check with
    /// [`Core::poll_login`], runs it off the loop and answers with
    /// [`Core::handle_login_result`]. Off (the default), the core checks passwords
    /// itself, blocking for argon2's milliseconds.
    pub fn set_async_logins(&mut self, on: bool) {
        self.async_logins = on;
    }

    /// The next password check to run off the loop.
    pub fn poll_login(&mut self) -> Option<LoginRequest> {
        let r = self.logins_out.pop()?;
        self.logins_in_flight += 1;
        Some(r)
    }

    /// The answer to a check taken with [`Core::poll_login`]: admits or refuses the
    /// client, if it is still the one that asked and still waiting.
    pub fn handle_login_result(&mut self, r: LoginResult) {
        self.logins_in_flight = self.logins_in_flight.saturating_sub(1);
        if let Some(n) = self.logins_by_source.get_mut(&r.source) {
            *n -= 1;
            if *n == 0 {
                self.logins_by_source.remove(&r.source);
            }
        }
        let waiting = self
            .clients
            .get_mut(r.slot.0 as usize)
            .and_then(Option::as_mut)
            .filter(|c| c.id == r.client && c.phase == Phase::Login && c.verifying);
        if let Some(c) = waiting {
            c.verifying = false;
            c.login_wanted = None;
            self.admit(r.slot, r.result, Some(&r.user));
        }
    }

    fn admit(
        &mut self,
        id: Slot,
        login: Result<Arc<Identity>, LoginError>,
        user: Option<&str>,
    ) -> bool {
        let max_frame = self.cfg.max_frame;
        let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return false;
        };
        let identity = match login {
            Ok(identity) => identity,
            Err(e @ (LoginError::Busy | LoginError::SourceBusy)) => {
                // A flood of logins refused busy is logged once a second at most, with
                // the count (hostile-input pass: a line per refusal, thousands a second).
                self.logins_busy += 1;
                let (logged, at) = self.logins_busy_logged;
                if logged == 0 || self.latest.saturating_sub(at) >= 1_000_000_000 {
                    tracing::warn!(client = c.id.0, name = c.name.as_str(), addr = %c.addr, user = user.unwrap_or(""), reason = %e, refused_busy_since_last_line = self.logins_busy - logged, refused_busy = self.logins_busy, "login refused");
                    self.logins_busy_logged = (self.logins_busy, self.latest);
                }
                self.totals.auth_failures += 1;
                self.fail(id, ErrorCode::AUTH_FAILED, &e.to_string());
                return false;
            }
            Err(e) => {
                tracing::warn!(client = c.id.0, name = c.name.as_str(), addr = %c.addr, user = user.unwrap_or(""), reason = %e, "login refused");
                self.totals.auth_failures += 1;
                self.fail(id, ErrorCode::AUTH_FAILED, &e.to_string());
                return false;
            }
        };
        let count = self
            .connections_of
            .entry(identity.user.clone())
            .or_default();
        if *count >= identity.max_connections {
            tracing::warn!(client = c.id.0, name = c.name.as_str(), addr = %c.addr, user = identity.name(), "connection refused: at the user's connection limit");
            // Closed connections whose subscriptions are still being removed count
            // until that ends (`teardown`): say so, or the refusal names connections
            // the user already closed (hostile-input pass).
            let user = Some(identity.user.clone());
            let removing = self
                .teardown
                .iter()
                .filter(|t| {
                    t.user == user && matches!(self.clients.get(t.slot.0 as usize), Some(None))
                })
                .count();
            // New-user pass: "authentication failed" read as a wrong password.
            let text = if removing == 0 {
                format!(
                    "connection refused: the credentials are right, but {} is at its limit of \
                     {} connections (max_connections); close one of them",
                    identity.name(),
                    identity.max_connections
                )
            } else {
                format!(
                    "connection refused: the credentials are right, but {} is at its limit of \
                     {} connections (max_connections), of which {removing} closed and still \
                     having their subscriptions removed; try again shortly",
                    identity.name(),
                    identity.max_connections
                )
            };
            self.totals.user_limit_refused += 1;
            self.fail(id, ErrorCode::AUTH_FAILED, &text);
            return false;
        }
        *count += 1;
        c.phase = Phase::Open;
        c.publish_check = (!identity.perms.publishes_anywhere()).then(Box::default);
        c.responses =
            (c.publish_check.is_some() && identity.perms.allows_responses()).then(Box::default);
        let granted = if identity.user.is_some() {
            caps::AUTH
        } else {
            0
        };
        tracing::info!(client = c.id.0, name = c.name.as_str(), addr = %c.addr, user = identity.name(), "client connected");
        c.identity = Some(identity);
        // WELCOME carries a u32: the low 32 bits of the id (see docs/protocol.md).
        let wire_id = c.id.0 as u32;
        let granted = granted | if c.mcast { caps::MCAST } else { 0 };
        let router_name = &self.cfg.name;
        if let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) {
            let before = c.egress.capacity();
            if c.mcast {
                // Topic resolution: the streams, then WELCOME (docs/multicast.md §10).
                self.mcast.encode_routes(self.latest, c.egress.control());
            }
            frame::encode_welcome_caps(
                c.egress.control(),
                wire_id,
                max_frame,
                granted,
                router_name,
            );
            account(&mut self.egress_bytes, before, c.egress.capacity());
        }
        self.mark_dirty(id);
        true
    }

    /// [`Core::on_publish`] with the topic memo, which is taken out of `self` for the
    /// call so that the topic it lends does not borrow the core.
    #[inline]
    fn publish_frame(&mut self, id: Slot, now: MonoNanos, m: &frame::Msg<'_>, raw: &[u8]) -> bool {
        // Always Some between calls (on_publish does not reach here again).
        let mut memo = self.topic_memo.take().unwrap_or_default();
        let open = self.on_publish(id, now, m, raw, &mut memo);
        self.topic_memo = Some(memo);
        open
    }

    /// A PUBLISH from an open client: topic and rights checked, routed, cached, and
    /// handed to guaranteed messaging when it is guaranteed. False: the client is
    /// being closed. `memo` remembers the last valid topic (one check per run of
    /// messages on one topic).
    #[inline]
    fn on_publish(
        &mut self,
        id: Slot,
        now: MonoNanos,
        m: &frame::Msg<'_>,
        raw: &[u8],
        memo: &mut TopicMemo,
    ) -> bool {
        let topic = match memo.validate(m.topic) {
            Ok(topic) => topic,
            Err(e) => {
                self.fail(id, ErrorCode::INVALID_TOPIC, &format!("invalid topic: {e}"));
                return false;
            }
        };
        // Its router-in stamp (routing, the spool's record) is taken after its arrival.
        let now = if m.flags & frame::flags::STAMPS != 0 {
            self.stamped_now(now)
        } else {
            now
        };
        let guaranteed = m.flags & frame::flags::GUARANTEED != 0;
        if guaranteed && !self.gm.is_publisher(id) {
            // Refused whole: not even the direct subscribers get it.
            self.fail(
                id,
                ErrorCode::NOT_OPEN,
                "guaranteed PUBLISH before PUB_OPEN on this connection",
            );
            return false;
        }
        let reply = m.reply.is_some_and(|r| !r.is_request());
        let Some(only) = self.may_publish(id, topic, now, reply) else {
            // Refused whole and answered; the connection stays.
            self.deny_publish(id, m, guaranteed);
            return true;
        };
        let request = m.reply.filter(|r| r.is_request());
        let reply_to = match request {
            // Checked here so that a responder is never handed a reply topic
            // it cannot publish to (that would cost it its connection).
            Some(r) => match validate_topic(r.to) {
                Ok(to) => Some(to),
                Err(e) => {
                    let text = format!("invalid reply topic: {e}");
                    self.fail(id, ErrorCode::INVALID_TOPIC, &text);
                    return false;
                }
            },
            None => None,
        };
        if let Some(to) = reply_to {
            // The answer is published to the reply topic on the requester's behalf
            // (a responder with `allow_responses` may publish it whatever its own
            // rules): the requester must be one who may receive it there.
            if let Err(e) = self.check(id, |p| p.may_subscribe(to)) {
                let text = format!("reply topic {to:?}: {e}");
                self.refuse_publish(id, m, guaranteed, text);
                return true;
            }
        }
        let routed = self.route(id, now, topic, raw, guaranteed, reply_to, only);
        if m.reply.is_none() && self.cache.is_enabled() {
            let wall = self.wall(now).as_nanos();
            self.cache.handle_publish(topic, raw, wall);
        }
        let busy = match routed {
            Routed::GrantsRefused => Some(
                "the request's responders owe too many replies (allow_responses: 1,024 \
                 reply topics or their byte bound, or 1,024 replies or 4 other requesters \
                 on this reply topic; at most 64 such members are passed over per \
                 request): not handed to any; try again later, with a reply topic only \
                 you may read",
            ),
            Routed::MembersLeaving => Some(
                "the request's groups have more than 1,024 members leaving before the \
                 next one (their subscriptions are still being removed): not handed to \
                 any; try again shortly",
            ),
            Routed::Yes | Routed::Unmatched => None,
        };
        if let (Some(text), Some(r)) = (busy, request) {
            self.totals.requests_busy += 1;
            self.control(id, |b| {
                frame::encode_error(b, r.correlation, ErrorCode::BUSY, false, text)
            });
        }
        if let (Routed::Unmatched, Some(r)) = (routed, request) {
            // Like NATS: the router knows its subscription table, so a request
            // nobody can answer fails now instead of timing out. Answers count
            // against the egress limit like every control frame: a storm of
            // unread ones ends in SLOW_CONSUMER, never in unbounded memory.
            self.totals.no_responders += 1;
            self.control(id, |b| {
                frame::encode_error(
                    b,
                    r.correlation,
                    ErrorCode::NO_RESPONDERS,
                    false,
                    "no responders: no subscription matches the request's topic",
                )
            });
        }
        if guaranteed {
            let wall = self.wall(now);
            let r = self
                .gm
                .handle_publish(&mut *self.spool, id, wall, now.as_nanos(), m);
            self.delivery_work += self.gm.last_publish_work();
            return self.gm_result(id, r);
        }
        true
    }

    /// Whether client `id` may publish to `topic` (a validated topic): decided once per
    /// topic per connection ([`PublishCache`]); free for a client without publish rules.
    /// A topic its rules refuse may still take a reply it owes (`allow_responses`):
    /// only a reply (`reply`: the REPLY field without a reply topic), never a request or
    /// a plain message, uses such a grant, and it then goes to the requesters it is owed
    /// to only. `None`: refused; `Some(None)`: allowed by the rules, routed to every
    /// subscriber; `Some(Some(to))`: allowed as a reply owed to `to`.
    #[inline]
    fn may_publish(
        &mut self,
        id: Slot,
        topic: &str,
        now: MonoNanos,
        reply: bool,
    ) -> Option<Option<Requesters>> {
        let c = self
            .clients
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)?;
        match (&mut c.publish_check, &c.identity) {
            (Some(cache), Some(identity)) => {
                if cache.may_publish(&identity.perms, topic) {
                    return Some(None);
                }
                if !reply {
                    return None;
                }
                c.responses
                    .as_mut()
                    .and_then(|r| r.take(topic, now.as_nanos()))
                    .map(Some)
            }
            _ => Some(None),
        }
    }

    /// Answers a refused PUBLISH: a PUB_NACK `not-permitted` for a guaranteed one (its
    /// publisher waits for an answer per sequence number), else a non-fatal ERROR
    /// PERMISSION_DENIED (request_id: the correlation id of a request, else 0).
    #[cold]
    fn deny_publish(&mut self, id: Slot, m: &frame::Msg<'_>, guaranteed: bool) {
        let topic = String::from_utf8_lossy(m.topic);
        let text = format!("not permitted to publish to {topic:?}");
        self.refuse_publish(id, m, guaranteed, text);
    }

    /// Answers a PUBLISH refused whole for `text`, as [`Core::deny_publish`] does.
    #[cold]
    fn refuse_publish(&mut self, id: Slot, m: &frame::Msg<'_>, guaranteed: bool, text: String) {
        if guaranteed {
            self.totals.denied += 1;
            self.gm.handle_denied_publish(id, m.seq.unwrap_or(0), &text);
            self.gm_output();
            return;
        }
        let request_id = m
            .reply
            .filter(|r| r.is_request())
            .map_or(0, |r| r.correlation);
        self.deny(id, request_id, &text);
    }

    /// A non-fatal ERROR PERMISSION_DENIED, counted.
    #[cold]
    fn deny(&mut self, id: Slot, request_id: u32, text: &str) {
        self.totals.denied += 1;
        self.control(id, |b| {
            frame::encode_error(b, request_id, ErrorCode::PERMISSION_DENIED, false, text)
        });
    }

    /// Runs `rule` on client `id`'s permissions (a client without an identity has none).
    fn check(
        &self,
        id: Slot,
        rule: impl FnOnce(&crate::auth::Perms) -> Result<(), String>,
    ) -> Result<(), String> {
        match self
            .clients
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .and_then(|c| c.identity.as_ref())
        {
            Some(identity) => rule(&identity.perms),
            None => Err("not logged in".to_owned()),
        }
    }

    /// Queue management: listing is for admins; the other operations need the queue
    /// name allowed, and a created queue's subscriptions must be patterns the client
    /// may subscribe to (a queue is another way to receive what they match).
    fn queue_request_allowed(&self, id: Slot, op: QueueOp, arg: &str) -> Result<(), String> {
        self.check(id, |p| self.queue_rule(p, op, arg))?;
        if op == QueueOp::Create {
            self.dead_letter_target_readers(arg)?;
        }
        Ok(())
    }

    /// A create naming an existing queue as its dead-letter queue makes that queue hold
    /// dead letters of any topic: refused while a client whose rules would not let it
    /// bind such a queue is bound to it (review: a user under subscribe rules made
    /// `orders-dlq` with a subscription it may read, bound it, and an admin's later
    /// create naming it as a dead-letter queue handed the user every dead letter).
    fn dead_letter_target_readers(&self, arg: &str) -> Result<(), String> {
        #[derive(serde::Deserialize)]
        struct Peek {
            #[serde(default)]
            dead_letter_queue: Option<String>,
        }
        let Some(dlq) = serde_json::from_str::<Peek>(arg)
            .ok()
            .and_then(|d| d.dead_letter_queue)
            .filter(|q| !self.gm.takes_dead_letters(q))
        else {
            return Ok(());
        };
        for slot in self.gm.bound_slots(&dlq) {
            if let Err(why) = self.check(slot, |p| p.may_hold_any_topic(&dlq)) {
                let who = self
                    .clients
                    .get(slot.0 as usize)
                    .and_then(Option::as_ref)
                    .map_or_else(String::new, |c| format!(" (client {})", c.id.0));
                return Err(format!(
                    "dead_letter_queue {dlq:?} is bound by a consumer that may not read \
                     dead letters of any topic{who}: {why}; name another queue, or unbind \
                     it first"
                ));
            }
        }
        Ok(())
    }

    /// The requester's own rules for a queue request.
    fn queue_rule(&self, p: &crate::auth::Perms, op: QueueOp, arg: &str) -> Result<(), String> {
        match op {
            QueueOp::List => match p.is_admin() {
                true => Ok(()),
                false => Err("not permitted to list queues (admin only)".to_owned()),
            },
            QueueOp::Create => {
                #[derive(serde::Deserialize)]
                struct Peek {
                    name: String,
                    #[serde(default)]
                    subscriptions: Vec<String>,
                    #[serde(default)]
                    dead_letter_queue: Option<String>,
                }
                // An unreadable definition is the engine's to refuse, with its reason.
                let Ok(def) = serde_json::from_str::<Peek>(arg) else {
                    return Ok(());
                };
                p.may_use_queue(&def.name)?;
                // A queue that takes dead letters holds any topic, whatever it subscribes
                // to: made by a client under subscribe rules only with a queues allow list
                // naming it (review: made first with the client's own patterns, the
                // router's dead-message queue or another's dead-letter queue could be
                // bound and read).
                // So does a queue with no subscriptions of its own: a dead-letter queue
                // made in advance (hostile-input pass: an anonymous client under
                // subscribe rules made one, with limits and a TTL of its choosing, under
                // the name an admin then named as a dead-letter queue).
                if self.gm.takes_dead_letters(&def.name) || def.subscriptions.is_empty() {
                    p.may_hold_any_topic(&def.name)?;
                }
                // Naming a dead-letter queue writes into it (and creates it): the
                // router's own dead-message queue is everyone's, any other must be a
                // queue the client may use.
                if let Some(dlq) = def
                    .dead_letter_queue
                    .as_deref()
                    .filter(|&q| q != gm::queue::DEFAULT_DMQ)
                {
                    p.may_use_queue(dlq)
                        .map_err(|e| format!("dead_letter_queue: {e}"))?;
                }
                for s in &def.subscriptions {
                    if let Ok(s) = validate_pattern(s.as_bytes()) {
                        p.may_subscribe(s)?;
                    }
                }
                Ok(())
            }
            QueueOp::Delete | QueueOp::Purge | QueueOp::Show => p.may_use_queue(arg),
        }
    }

    /// Whether client `id` may subscribe to (or query the cache with) `pattern`, a
    /// validated pattern; a shared subscription is judged by the pattern it shares.
    fn may_subscribe(&self, id: Slot, pattern: &str) -> Result<(), String> {
        let inner = match groups::parse(pattern) {
            Ok(Some(shared)) => shared.pattern,
            _ => pattern,
        };
        match validate_pattern(inner.as_bytes()) {
            Ok(inner) => self.check(id, |p| p.may_subscribe(inner)),
            // Its syntax is refused on its own (INVALID_PATTERN) by the caller.
            Err(_) => Ok(()),
        }
    }

    /// A SUBSCRIBE asking for an initial image (or only the image: a cache query).
    ///
    /// The cut between cached and live messages is exact because the router is one
    /// thread: the subscription is installed and the image appended to the client's
    /// egress in this one call, so every PUBLISH handled before it is in the cache (or
    /// was replaced there by a later one), and every PUBLISH handled after it is routed
    /// live behind the image. Order on the wire: the cached MESSAGEs (flag CACHED),
    /// then the ACK, then live MESSAGEs.
    ///
    /// The image is queued whole, beyond `egress_limit` if need be (it is bounded by
    /// the cache's `cache_max_bytes`); a client whose unread bytes already exceed the
    /// limit gets BUSY instead, so asking again without reading cannot pile images up.
    ///
    /// Finding the image examines every cached topic whatever the pattern matches, so
    /// the topics examined are budgeted per connection (`image_scan_rate`) and for the
    /// router (`image_scan_rate_total`): past either, BUSY, before any scan.
    fn on_image(
        &mut self,
        id: Slot,
        now: MonoNanos,
        request_id: u32,
        pattern: &[u8],
        image: Image,
    ) {
        let limit = self.cfg.egress_limit;
        let memory_limit = self.cfg.egress_memory_limit;
        let pressed = self.egress_bytes >= memory_limit;
        let refusal = match validate_pattern(pattern) {
            Err(e) => Some((ErrorCode::INVALID_PATTERN, format!("invalid pattern: {e}"))),
            Ok(p) if crate::groups::is_shared(p) => Some((
                ErrorCode::INVALID_PATTERN,
                "initial images are not available for shared subscriptions".to_owned(),
            )),
            Ok(p) => match (self.may_subscribe(id, p), self.client_mut(id)) {
                (Err(text), _) => Some((ErrorCode::PERMISSION_DENIED, text)),
                (Ok(()), Some(c)) if c.egress.pending() > limit => Some((
                    ErrorCode::BUSY,
                    format!("more than {limit} bytes unread: read them before asking for an image"),
                )),
                // An image may be large (up to `cache_max_bytes`) and is queued whole:
                // not while the buffers are at the router-wide bound.
                _ if pressed => Some((
                    ErrorCode::BUSY,
                    format!(
                        "the router's egress buffers hold egress_memory_limit ({memory_limit} \
                         bytes) or more: ask for the image again later"
                    ),
                )),
                _ => None,
            },
        };
        let refusal = refusal.or_else(|| self.image_over_budget(id, now, pattern));
        if let Some((code, text)) = refusal {
            if code == ErrorCode::PERMISSION_DENIED {
                self.totals.denied += 1;
            }
            self.control(id, |b| {
                frame::encode_error(b, request_id, code, false, &text)
            });
            return;
        }
        // Checked above.
        let pattern = std::str::from_utf8(pattern).unwrap_or_default();
        if image == Image::ThenLive {
            // Shared subscriptions were refused above.
            if let Err(text) = self.add_pattern(id, pattern, None) {
                self.control(id, |b| {
                    frame::encode_error(
                        b,
                        request_id,
                        ErrorCode::TOO_MANY_SUBSCRIPTIONS,
                        false,
                        &text,
                    )
                });
                return;
            }
        }
        let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        if c.phase != Phase::Open {
            return;
        }
        // Checked by image_over_budget above (nothing changed it since): spent only
        // now that the scan is certain.
        let cost = self.cache.scan_cost(pattern);
        c.image_budget.take(cost);
        self.image_budget.take(cost);
        let before = c.egress.capacity();
        let out = c.egress.control();
        let mut bytes = 0usize;
        let n = self.cache.for_each_matching(pattern, |f, at| {
            bytes += f.len();
            frame::encode_cached_message(out, f, at);
        });
        frame::encode_ack(out, request_id);
        // What the image sent is owed too, after the fact (hostile-input pass: the
        // budget counted topics examined only, so a loop of 12-byte queries for 70
        // cached 1 MB messages had the router copy 64 MB per query, and a depth-1000
        // cache 109 MiB: other clients waited up to 387 ms).
        let sent = image_send_cost(n, bytes);
        c.image_budget.take(sent);
        self.image_budget.take(sent);
        c.egress.fit(limit);
        account(&mut self.egress_bytes, before, c.egress.capacity());
        c.counters.msgs_out += n as u64;
        self.totals.msgs_out += n as u64;
        // Queued whole, beyond the limit: it must be read within the drain timeout,
        // or a client that asked and never reads would hold it (and, with others,
        // the router-wide egress memory every image needs) for as long as it stays.
        if c.egress.pending() > limit && c.drain_by.is_none() {
            let by = now.add_nanos(self.cfg.drain_timeout_ms.saturating_mul(1_000_000));
            c.drain_by = Some(by);
            c.image_allow = c.egress.pending();
            self.lower_deadline(by);
        }
        self.mark_dirty(id);
    }

    /// The BUSY refusal of an image whose scan client `id`'s budget or the router's
    /// cannot pay for now (counted); None if both can (the caller spends it once the
    /// scan is certain). A full budget pays for one scan even when it costs more than
    /// the burst (a long pattern over a full cache): the rest is owed and repaid at
    /// the rate before the next.
    fn image_over_budget(
        &mut self,
        id: Slot,
        now: MonoNanos,
        pattern: &[u8],
    ) -> Option<(ErrorCode, String)> {
        let c = self
            .clients
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)?;
        // Validated by the caller.
        let cost = self
            .cache
            .scan_cost(std::str::from_utf8(pattern).unwrap_or_default());
        let pays = |b: &mut TokenBucket| b.available(now) >= cost.min(b.burst());
        let own = pays(&mut c.image_budget);
        if own && pays(&mut self.image_budget) {
            return None;
        }
        self.cache.count_throttled();
        let (whose, key, rate) = match own {
            true => (
                "all connections together",
                "image_scan_rate_total",
                self.cfg.image_scan_rate_total,
            ),
            false => (
                "one connection",
                "image_scan_rate",
                self.cfg.image_scan_rate,
            ),
        };
        Some((
            ErrorCode::BUSY,
            format!(
                "an image examines every slot of the cache's topic table (counted {cost} \
                 with this pattern's length now) and {whose} may examine {rate} per second \
                 ({key}): ask again later"
            ),
        ))
    }

    /// A client let go of `text`: its shared copy goes when no other client holds it.
    /// A copy a monitoring snapshot still holds outlives it; such leftovers are swept
    /// once the set is over twice the subscriptions held (plus 1,024) and twice its size
    /// after the last sweep, so it stays bounded at a cost of one pass per as many
    /// releases.
    fn release_pattern(&mut self, text: Arc<str>) {
        // Here, in the set, and nowhere else.
        if Arc::strong_count(&text) <= 2 {
            self.pattern_text.remove(&*text);
        }
        drop(text);
        let held = self.index.len() + self.groups.members_total();
        let n = self.pattern_text.len();
        if n > 2 * held + 1024 && n > 2 * self.pattern_text_swept {
            self.pattern_text.retain(|t| Arc::strong_count(t) > 1);
            self.pattern_text_swept = self.pattern_text.len();
        }
    }

    /// Nodes of both subscription indexes (direct and shared), roots included: what
    /// `max_index_nodes` bounds.
    fn index_nodes(&self) -> usize {
        self.index.node_count() + self.groups.node_count()
    }

    /// Adds a valid (and permitted) `pattern` to client `id`'s subscriptions, `shared`
    /// its parse when it is `$share/...`: nothing to do if the client holds it already;
    /// refused with the reason when one of the bounds would be passed (the client's
    /// subscriptions, levels and shared subscriptions; the router's index nodes, shared
    /// groups and match work), in which case nothing is left behind.
    fn add_pattern(
        &mut self,
        id: Slot,
        pattern: &str,
        shared: Option<groups::Shared<'_>>,
    ) -> Result<(), String> {
        let index_nodes = self.index_nodes();
        let new_group = shared.is_some() && !self.groups.exists(pattern);
        let groups = self.groups.len();
        let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return Ok(());
        };
        if c.patterns.contains(pattern) {
            return Ok(());
        }
        if let Err(mut refused) = c.room_for(pattern, &self.cfg, index_nodes) {
            let removing = self.subscriptions_removing();
            if removing > 0 && refused.starts_with("the router's subscription index is full") {
                // The nodes of closed clients' patterns are freed a bounded number per
                // turn: the subscriber may succeed again shortly.
                refused.push_str(&format!(
                    " ({removing} subscriptions of closed clients are still being removed: \
                     retry shortly)"
                ));
            }
            return Err(refused);
        }
        if shared.is_some() {
            c.room_for_shared(&self.cfg, new_group, groups)?;
        }
        let before = self.match_work();
        match shared {
            Some(s) => self.groups.join(id, pattern, s),
            None => {
                self.index.subscribe(id, pattern);
            }
        }
        let after = self.match_work();
        let max = self.cfg.max_match_work;
        if after > max && after > before {
            match shared {
                Some(s) => self.groups.leave(id, pattern, s),
                None => {
                    self.index.unsubscribe(id, pattern);
                }
            }
            return Err(format!(
                "this pattern would let one topic match take {after} steps in the router's \
                 subscription index, more than max_match_work ({max}): patterns that branch \
                 at many levels (a/*/a/*/...) cost every message that much"
            ));
        }
        let text = match self.pattern_text.get(pattern) {
            Some(t) => t.clone(),
            None => {
                let t: Arc<str> = pattern.into();
                self.pattern_text.insert(t.clone());
                t
            }
        };
        if let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) {
            c.patterns.insert(text);
            c.patterns_stale = true;
            c.levels += levels(pattern);
            c.shared += usize::from(shared.is_some());
        }
        Ok(())
    }

    /// The most steps one topic match can take, direct and shared indexes together.
    fn match_work(&self) -> u64 {
        self.index.match_work() + self.groups.match_work()
    }

    fn on_subscribe(&mut self, id: Slot, request_id: u32, pattern: &[u8], add: bool) {
        let pattern = match validate_pattern(pattern) {
            Ok(p) => p,
            Err(e) => {
                let text = format!("invalid pattern: {e}");
                self.control(id, |b| {
                    frame::encode_error(b, request_id, ErrorCode::INVALID_PATTERN, false, &text)
                });
                return;
            }
        };
        let shared = match groups::parse(pattern) {
            Ok(s) => s,
            Err(why) => {
                let text = format!("invalid pattern: {why}");
                self.control(id, |b| {
                    frame::encode_error(b, request_id, ErrorCode::INVALID_PATTERN, false, &text)
                });
                return;
            }
        };
        if add {
            if let Err(text) = self.may_subscribe(id, pattern) {
                self.deny(id, request_id, &text);
                return;
            }
        }
        let outcome = if add {
            self.add_pattern(id, pattern, shared)
                .map_err(|text| (ErrorCode::TOO_MANY_SUBSCRIPTIONS, text))
        } else {
            let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) else {
                return;
            };
            c.patterns_stale = true;
            let held = c.patterns.take(pattern);
            if held.is_some() {
                c.levels -= levels(pattern);
                c.shared -= usize::from(shared.is_some());
            }
            if let Some(text) = held {
                self.release_pattern(text);
                match shared {
                    Some(s) => self.groups.leave(id, pattern, s),
                    None => {
                        self.index.unsubscribe(id, pattern);
                    }
                }
                Ok(())
            } else {
                Err((
                    ErrorCode::NOT_SUBSCRIBED,
                    format!("not subscribed to {pattern:?}"),
                ))
            }
        };
        match outcome {
            Ok(()) => self.control(id, |b| frame::encode_ack(b, request_id)),
            Err((code, text)) => self.control(id, |b| {
                frame::encode_error(b, request_id, code, false, &text)
            }),
        }
    }

    /// Answers a STATS_REQUEST, unless the previous STATS_REPLY to this client is still
    /// unread: then a non-fatal ERROR `BUSY` (a few dozen bytes instead of a document
    /// of up to `max_frame`), so requesting without reading cannot amplify.
    /// Whether the answer whose end `due` gives (the client's output count once it is
    /// written) is still unwritten: the client has not read the last one yet.
    fn unread_answer(&self, id: Slot, due: impl Fn(&Client) -> Option<u64>) -> bool {
        self.clients
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .is_some_and(|c| {
                due(c).is_some_and(|due| c.counters.bytes_out < due && c.egress.pending() > 0)
            })
    }

    fn on_stats_request(&mut self, id: Slot, now: MonoNanos, request_id: u32) {
        let admin = self.check(id, |p| match p.is_admin() {
            true => Ok(()),
            false => Err("not permitted to read the router's stats (admin only)".to_owned()),
        });
        if let Err(text) = admin {
            self.deny(id, request_id, &text);
            return;
        }
        if self.client_mut(id).is_none() {
            return;
        }
        if self.unread_answer(id, |c| c.stats_due) {
            self.control(id, |b| {
                frame::encode_error(
                    b,
                    request_id,
                    ErrorCode::BUSY,
                    false,
                    "the previous STATS_REPLY is still unread; read it, then ask again",
                )
            });
            return;
        }
        let json = match &self.stats_shared {
            Some((json, until)) if now < *until => json.clone(),
            _ => {
                let json: Arc<str> = self.stats_json(now).into();
                let share = (json.len() as u64)
                    .saturating_mul(STATS_SHARE_NS_PER_BYTE)
                    .min(STATS_SHARE_MAX_NS);
                self.stats_shared = Some((json.clone(), now.add_nanos(share)));
                json
            }
        };
        self.control(id, |b| frame::encode_stats_reply(b, request_id, &json));
        if let Some(c) = self.client_mut(id) {
            c.stats_due = Some(c.counters.bytes_out + c.egress.pending() as u64);
        }
    }

    /// Routes one PUBLISH (`raw` is the whole frame): queues the MESSAGE for every
    /// matching subscriber (`only`: a reply allowed by `allow_responses`, for the
    /// requesters it is owed to alone, never by multicast); [`Routed`] says whether
    /// anyone was handed it.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn route(
        &mut self,
        from: Slot,
        now: MonoNanos,
        topic: &str,
        raw: &[u8],
        guaranteed: bool,
        reply_to: Option<&str>,
        only: Option<Requesters>,
    ) -> Routed {
        let mut requester = ClientId(0);
        if let Some(c) = self.client_mut(from) {
            c.counters.msgs_in += 1;
            c.direct_publisher |= !guaranteed;
            requester = c.id;
        }
        self.totals.msgs_in += 1;
        // Sent once to its multicast group, if the topic leaves by multicast; then
        // multicast clients subscribed directly are not sent it here.
        let by_mcast = only.is_none() && self.mcast.publish(now, topic, raw);
        self.matched.clear();
        self.index.match_topic(topic, &mut self.matched);
        let direct = if by_mcast { self.matched.len() } else { 0 };
        // Responders that could not take this request's reply, and whether anyone
        // else was handed it (`Routed::GrantsRefused`).
        let mut refused = false;
        // Only leaving members stopped a group's look (`Routed::MembersLeaving`).
        let mut leaving = false;
        if !self.groups.is_empty() {
            if let Some(to) = only {
                let clients = &self.clients;
                let open_client = |s: Slot| {
                    clients
                        .get(s.0 as usize)
                        .and_then(Option::as_ref)
                        .filter(|c| c.phase == Phase::Open)
                };
                // A reply owed to requesters alone goes, in each group, to a member
                // that is one of them: the requesters' own subscriptions are asked,
                // not the members walked (hostile-input pass: 100 groups of 1,000
                // members matching the reply topic, none a requester, cost ~210 µs of
                // routing per reply).
                let mut requesters = [Slot(0); MAX_REQUESTERS_PER_TOPIC];
                let mut n = 0;
                for (id, slot) in to.iter() {
                    // Only a requester with shared subscriptions can be in a group.
                    if open_client(Slot(slot)).is_some_and(|c| c.id.0 == id && c.shared > 0) {
                        requesters[n] = Slot(slot);
                        n += 1;
                    }
                }
                self.groups
                    .pick_from(topic, &mut self.matched, &requesters[..n], |s, key| {
                        open_client(s).is_some_and(|c| c.patterns.contains(key))
                    });
            } else {
                // A request goes, in each group, to a member that can take its reply
                // (review: a member owing 1,024 replies got its turns and the requests
                // BUSY, the others idle), passing over at most MAX_PASSED_OVER members
                // in all (hostile-input pass: 100 groups of 1,000 members that could
                // not take it were all asked, ~1.9 ms of routing per request).
                // Members that cannot take messages at all (leaving, their
                // subscriptions not yet torn down) do not count against the
                // passed-over bound (review: counted, 86 of them made a plain request
                // BUSY); a request skips at most MAX_SKIPPED of them.
                let at = now.as_nanos();
                let clients = &mut self.clients;
                let mut passed_over = false;
                let budget = if reply_to.is_some() {
                    MAX_PASSED_OVER
                } else {
                    usize::MAX
                };
                let picked = self.groups.pick(topic, &mut self.matched, budget, |s| {
                    let Some(c) = clients
                        .get_mut(s.0 as usize)
                        .and_then(Option::as_mut)
                        .filter(|c| c.phase == Phase::Open)
                    else {
                        return Look::Skip;
                    };
                    let can = reply_to.is_none_or(|rt| {
                        c.responses
                            .as_mut()
                            .is_none_or(|r| r.can_grant(rt, requester.0, at))
                    });
                    if can {
                        Look::Take
                    } else {
                        passed_over = true;
                        Look::PassOver
                    }
                });
                refused = passed_over || picked.cut;
                leaving = picked.cut_by_leaving && !passed_over;
            }
        }
        self.delivery_work += 1 + self.matched.len() as u64;
        if self.matched.is_empty() {
            // A guaranteed publish is the queues' (`gm` totals, each queue's counters):
            // counted here it made a healthy order flow read as unrouted (new-user pass).
            // A request answered BUSY is counted there (`requests_busy`), not here.
            self.totals.unrouted += u64::from(!by_mcast && !guaranteed && !refused);
            return match (by_mcast, refused) {
                (true, _) => Routed::Yes,
                (false, true) if leaving => Routed::MembersLeaving,
                (false, true) => Routed::GrantsRefused,
                (false, false) => Routed::Unmatched,
            };
        }
        let limit = self.cfg.egress_limit;
        let memory_limit = self.cfg.egress_memory_limit;
        let share = self.egress_share;
        let need = raw.len() + 8;
        let discard = self.cfg.slow_consumer == SlowConsumerPolicy::Discard;
        let clock = self.stamp_clock;
        let stamp = move || clock.map_or(now, |read| read()).as_nanos();
        let mut handed = by_mcast;
        for i in 0..self.matched.len() {
            let to = self.matched[i];
            let Some(c) = self.clients.get_mut(to.0 as usize).and_then(Option::as_mut) else {
                continue;
            };
            if c.phase != Phase::Open
                || (i < direct && c.mcast)
                || only.is_some_and(|to| !to.contains(c.id.0))
            {
                continue;
            }
            if let Some(reply_to) = reply_to {
                if !grant_response(c, reply_to, requester, from, now) {
                    refused = true;
                    continue;
                }
            }
            // The requester's own copy (a `>` monitor) answers nothing (review).
            handed |= to != from;
            // At the router-wide bound every client may hold its share only; one over
            // it within its own limit is slow because of the bound, not its limit.
            let pressed = self.egress_bytes >= memory_limit;
            let (lim, by_memory) = if pressed {
                (share, c.egress.pending() + need <= limit)
            } else {
                (limit, false)
            };
            let before = c.egress.capacity();
            let pushed = c
                .egress
                .push_message(raw, lim, discard, now.as_nanos(), stamp);
            if pressed {
                // A buffer grown large before the bound was reached gives the excess
                // back (once: it then stays within its share).
                c.egress.fit(share);
            }
            account(&mut self.egress_bytes, before, c.egress.capacity());
            match pushed {
                Push::Queued => {}
                Push::QueuedAfterDiscard(n) => {
                    c.counters.discards += n;
                    self.totals.discards += n;
                    if by_memory {
                        self.totals.memory_discards += n;
                    }
                    if !c.discarding {
                        c.discarding = true;
                        // `pending` is what is left once the oldest messages went (about
                        // half the limit: new-user pass, a "full" buffer at half its size
                        // read as a contradiction).
                        if by_memory {
                            tracing::warn!(
                                client = c.id.0, name = c.name.as_str(), discarded = n,
                                pending_after_discard = c.egress.pending(),
                                egress_bytes = self.egress_bytes, egress_memory_limit = memory_limit, share,
                                "slow consumer: the router-wide egress bound (egress_memory_limit) is reached and this client holds more than its share; discarding its oldest messages"
                            );
                        } else {
                            tracing::warn!(
                                client = c.id.0, name = c.name.as_str(), discarded = n,
                                pending_after_discard = c.egress.pending(), egress_limit = limit,
                                "slow consumer: egress buffer full (egress_limit), discarding its oldest messages (down to half the limit)"
                            );
                        }
                    }
                }
                Push::Full => {
                    let text = if by_memory {
                        self.totals.memory_disconnects += 1;
                        format!(
                            "slow consumer: the router's egress buffers hold egress_memory_limit \
                             ({memory_limit} bytes) or more and this client has more than its \
                             share ({share} bytes) queued and unread; disconnecting"
                        )
                    } else {
                        format!(
                            "slow consumer: more than {limit} bytes queued and unread; disconnecting"
                        )
                    };
                    let before = c.egress.capacity();
                    c.egress.drop_messages();
                    account(&mut self.egress_bytes, before, c.egress.capacity());
                    self.fail(to, ErrorCode::SLOW_CONSUMER, &text);
                    continue;
                }
            }
            c.counters.msgs_out += 1;
            self.totals.msgs_out += 1;
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(to);
            }
        }
        match (refused && !handed, leaving) {
            (true, true) => Routed::MembersLeaving,
            (true, false) => Routed::GrantsRefused,
            (false, _) => Routed::Yes,
        }
    }

    /// Appends a control frame (an answer: PONG, ACK, non-fatal ERROR, STATS_REPLY,
    /// WELCOME) to `id`'s egress. Control frames count against `egress_limit` like
    /// messages but cannot be discarded: when the client's unread bytes exceed the
    /// limit (after discarding its queued messages under the `discard` policy), the
    /// client is disconnected with SLOW_CONSUMER whatever the policy. So a client that
    /// keeps asking without reading costs the router at most its egress limit plus one
    /// frame.
    ///
    /// While all egress buffers together hold `egress_memory_limit` or more, the limit
    /// here is the client's share ([`Config::egress_share`]) instead, as for messages.
    fn control(&mut self, id: Slot, encode: impl FnOnce(&mut Vec<u8>)) {
        let limit = self.cfg.egress_limit;
        let memory_limit = self.cfg.egress_memory_limit;
        let pressed = self.egress_bytes >= memory_limit;
        let lim = if pressed { self.egress_share } else { limit };
        let discard = self.cfg.slow_consumer == SlowConsumerPolicy::Discard;
        let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        if c.phase == Phase::Closing {
            // Nothing more is owed to a closing client but what is already queued.
            return;
        }
        // Behind an image still being read (within its drain timeout), answers get
        // their limit on top of what the image left unread (protocol.md 5.2: the image
        // is queued whole; requests may be pipelined behind it).
        let lim = match c.drain_by {
            Some(_) => lim.saturating_add(c.image_allow),
            None => lim,
        };
        let before = c.egress.capacity();
        encode(c.egress.control());
        let by_memory = pressed && c.egress.pending() <= limit;
        if c.egress.pending() > lim && discard {
            let n = c.egress.discard_messages(lim / 2);
            c.counters.discards += n;
            self.totals.discards += n;
            if by_memory {
                self.totals.memory_discards += n;
            }
        }
        let over = c.egress.pending() > lim;
        if over {
            // Answers it does not read are worth nothing to it now: the error goes next.
            c.egress.drop_unwritten();
        }
        // A control frame may have doubled the vector past the limit: give it back.
        c.egress.fit(lim);
        account(&mut self.egress_bytes, before, c.egress.capacity());
        self.mark_dirty(id);
        if over {
            let text = if by_memory {
                self.totals.memory_disconnects += 1;
                format!(
                    "slow consumer: the router's egress buffers hold egress_memory_limit \
                     ({memory_limit} bytes) or more and this client has more than its share \
                     ({} bytes) of answers and queue deliveries (PONG, ACK, ERROR, STATS_REPLY, DELIVER) queued and unread; \
                     disconnecting",
                    self.egress_share
                )
            } else {
                format!(
                    "slow consumer: more than {limit} bytes of answers and queue deliveries (PONG, ACK, ERROR, STATS_REPLY, DELIVER) queued and unread; disconnecting"
                )
            };
            self.fail(id, ErrorCode::SLOW_CONSUMER, &text);
        }
    }

    /// Appends a frame that ends the conversation (fatal ERROR, CLOSE): exempt from the
    /// limit, since at most one is sent per client.
    fn last_word(&mut self, id: Slot, encode: impl FnOnce(&mut Vec<u8>)) {
        let Some(c) = self.client_mut(id) else {
            return;
        };
        if c.phase == Phase::Closing {
            return;
        }
        let before = c.egress.capacity();
        encode(c.egress.control());
        let after = c.egress.capacity();
        account(&mut self.egress_bytes, before, after);
        self.mark_dirty(id);
    }

    fn mark_dirty(&mut self, id: Slot) {
        if let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) {
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(id);
            }
        }
    }

    /// Sends a fatal ERROR and starts closing the client.
    pub fn fail(&mut self, id: Slot, code: ErrorCode, text: &str) {
        self.fail_counted(id, code, text, true);
    }

    /// [`Core::fail`], counted in `disconnects_error` when `error`.
    fn fail_counted(&mut self, id: Slot, code: ErrorCode, text: &str, error: bool) {
        if self.phase(id).is_none_or(|p| p == Phase::Closing) {
            return;
        }
        self.last_word(id, |b| frame::encode_error(b, 0, code, true, text));
        self.totals.disconnects_error += u64::from(error);
        self.begin_close(id, code, text);
    }

    /// Sends CLOSE and starts closing the client.
    pub fn close(&mut self, id: Slot, code: ErrorCode, reason: &str) {
        self.last_word(id, |b| frame::encode_close(b, code, reason));
        self.begin_close(id, code, reason);
    }

    fn begin_close(&mut self, id: Slot, code: ErrorCode, reason: &str) {
        let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        if c.phase == Phase::Closing {
            return;
        }
        c.phase = Phase::Closing;
        if let Some(wanted) = c.login_wanted.take() {
            wanted.store(false, Ordering::Relaxed);
        }
        c.close_reason = Some((code, reason.to_string()));
        c.levels = 0;
        c.shared = 0;
        c.patterns_stale = true;
        // Its subscriptions stay in the indexes until removed, a bounded number per
        // turn; routing skips a client that is not open, so it receives nothing.
        let patterns = std::mem::take(&mut c.patterns);
        if !patterns.is_empty() {
            c.tearing_down = true;
            self.teardown.push_back(Teardown {
                slot: id,
                patterns: patterns.into_iter().peekable(),
                user: c.identity.as_ref().map(|i| i.user.clone()),
            });
            self.teardown();
        }
        // Its in-flight guaranteed deliveries go back to their queues now; it frees its
        // publisher identity. (The deliveries to others land in their egress later, at
        // the next gm output.)
        let now = self.latest;
        self.gm.handle_disconnect(&mut *self.spool, now, id);
        let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        if code == ErrorCode::NORMAL || code == ErrorCode::SHUTTING_DOWN {
            tracing::info!(client = c.id.0, name = c.name.as_str(), addr = %c.addr, %reason, "closing client");
        } else {
            tracing::warn!(client = c.id.0, name = c.name.as_str(), addr = %c.addr, error = %code, %reason, "disconnecting client");
        }
        self.closing.push(id);
    }

    /// Frees the egress buffers that are drained but hold more than 64 KiB (a burst's
    /// capacity): the driver calls it about once a second, so memory a burst took is
    /// not held, and counted, for ever. A scan of the clients, never on the message
    /// path.
    pub fn release_idle_egress(&mut self) {
        for c in self.clients.iter_mut().flatten() {
            if c.egress.pending() == 0 && c.egress.capacity() > KEEP_EGRESS {
                let before = c.egress.capacity();
                c.egress.release();
                account(&mut self.egress_bytes, before, c.egress.capacity());
            }
        }
    }

    /// Bytes all egress buffers hold allocated (see [`RouterStats::egress_bytes`]).
    pub fn egress_bytes(&self) -> usize {
        self.egress_bytes
    }

    /// The sum the accounting keeps, recomputed by a scan (tests check they agree).
    #[cfg(test)]
    fn egress_capacity_scan(&self) -> usize {
        self.clients
            .iter()
            .flatten()
            .map(|c| c.egress.capacity())
            .sum()
    }

    /// Clients that began closing since the last call. The driver calls it once per loop
    /// turn, after the turn's writes: it also goes on removing closing clients'
    /// subscriptions from the indexes, at most [`TEARDOWN_PATTERNS_PER_TURN`] (and
    /// [`TEARDOWN_LEVELS_PER_TURN`] levels) between two calls, those a close removed at
    /// once included (see [`Core::has_pending_teardown`]), plus as many patterns and
    /// levels as clients subscribed since the last call. Without that share, clients
    /// that subscribe and disconnect over and over (each read may add
    /// [`SUBSCRIPTION_WORK_PER_READ`]) added patterns faster than closing clients' were
    /// removed, and the slots those held until then filled `max_clients` (hostile-input
    /// pass: four such connections kept every newcomer out of a 100-client router).
    /// A turn's teardown so costs at most its own budget plus what the turn's
    /// subscribing cost.
    pub fn poll_closing(&mut self, out: &mut Vec<Slot>) {
        out.append(&mut self.closing);
        let (patterns, levels) = std::mem::take(&mut self.subscribed_this_turn);
        self.teardown_budget.patterns += patterns;
        self.teardown_budget.levels += levels;
        self.teardown();
        self.teardown_budget = TeardownBudget::TURN;
    }

    /// Whether closing clients' subscriptions are still being removed: the driver must
    /// then not sleep, so that [`Core::poll_closing`] finishes the work in the next turns
    /// (and their slots come free) while other clients are served in between.
    pub fn has_pending_teardown(&self) -> bool {
        !self.teardown.is_empty()
    }

    /// Subscriptions of closed clients still in the indexes, waiting for their removal
    /// (a bounded number per turn); they count towards `max_index_nodes` until then.
    fn subscriptions_removing(&self) -> usize {
        self.teardown.iter().map(|t| t.patterns.len()).sum()
    }

    /// Removes closing clients' subscriptions, oldest client first, while this turn's
    /// budget lasts. A slot whose client is gone comes free with its last pattern.
    fn teardown(&mut self) {
        while let Some(t) = self.teardown.front_mut() {
            let Some(cost) = t.patterns.peek().map(|p| levels(p)) else {
                // This client's last pattern is gone.
                let Some(done) = self.teardown.pop_front() else {
                    return;
                };
                match self.clients.get_mut(done.slot.0 as usize) {
                    Some(Some(c)) => c.tearing_down = false,
                    Some(None) => {
                        self.held -= 1;
                        self.free.push(done.slot.0);
                        if let Some(user) = done.user {
                            self.count_out(&user);
                        }
                    }
                    None => {}
                }
                continue;
            };
            if !self.teardown_budget.take(cost) {
                return;
            }
            let (slot, Some(p)) = (t.slot, t.patterns.next()) else {
                continue;
            };
            match groups::parse(&p) {
                Ok(Some(s)) => self.groups.leave(slot, &p, s),
                _ => {
                    self.index.unsubscribe(slot, &p);
                }
            }
            self.release_pattern(p);
        }
    }

    /// Clients whose egress gained bytes since the last call.
    pub fn poll_transmit(&mut self, out: &mut Vec<Slot>) {
        self.gm_output();
        for &id in &self.dirty {
            if let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) {
                c.dirty = false;
            }
        }
        out.append(&mut self.dirty);
    }

    /// The bytes waiting to be written to `id`.
    #[inline]
    pub fn egress(&self, id: Slot) -> &[u8] {
        match self.clients.get(id.0 as usize).and_then(Option::as_ref) {
            Some(c) => c.egress.unwritten(),
            None => &[],
        }
    }

    /// Records that `n` bytes of `id`'s egress were written.
    #[inline]
    pub fn handle_written(&mut self, id: Slot, n: usize) {
        let pressed = self.egress_bytes >= self.cfg.egress_memory_limit;
        let limit = self.cfg.egress_limit;
        if let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) {
            c.egress.consume(n);
            c.counters.bytes_out += n as u64;
            // Written bytes come first from what was queued before the answers behind
            // the image (review: the allowance stayed the whole image while it was read).
            c.image_allow = c.image_allow.saturating_sub(n);
            if c.drain_by.is_some() && c.egress.pending() <= limit {
                c.drain_by = None;
            }
            if c.egress.pending() == 0 {
                if pressed && c.egress.capacity() > KEEP_EGRESS {
                    // At the router-wide bound a drained buffer gives its memory back.
                    let before = c.egress.capacity();
                    c.egress.release();
                    account(&mut self.egress_bytes, before, 0);
                }
                if c.discarding {
                    c.discarding = false;
                    tracing::info!(
                        client = c.id.0,
                        name = c.name.as_str(),
                        discards = c.counters.discards,
                        "slow consumer caught up"
                    );
                }
            }
        }
        self.totals.bytes_out += n as u64;
    }

    /// Forgets a client whose socket is closed (after an error, EOF or a finished close).
    pub fn handle_closed(&mut self, id: Slot, why: &str) {
        if self
            .clients
            .get(id.0 as usize)
            .is_some_and(|c| c.as_ref().is_some_and(|c| c.phase != Phase::Closing))
        {
            self.begin_close(id, ErrorCode::NORMAL, why);
        }
        if let Some(slot) = self.clients.get_mut(id.0 as usize) {
            if let Some(c) = slot.take() {
                account(&mut self.egress_bytes, c.egress.capacity(), 0);
                self.live -= 1;
                if c.evicted {
                    self.evicted -= 1;
                }
                if c.tearing_down {
                    // Reused once its subscriptions are all removed (`teardown`): a new
                    // client here would receive messages for them. Until then it still
                    // counts for its user, too.
                    self.held += 1;
                } else {
                    self.free.push(id.0);
                    if let Some(identity) = c.identity {
                        self.count_out(&identity.user);
                    }
                }
            }
        }
        self.closing.retain(|c| *c != id);
        self.gm_output();
    }

    /// A connection of `user` (`None`: anonymous) no longer counts towards its limit.
    fn count_out(&mut self, user: &Option<Box<str>>) {
        if let Some(n) = self.connections_of.get_mut(user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.connections_of.remove(user);
            }
        }
    }

    /// Where a client is connected from, if connected.
    pub fn peer_addr(&self, id: Slot) -> Option<Peer> {
        self.clients
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .map(|c| c.addr)
    }

    /// The client id (what the log lines and the stats name) of the client in slot
    /// `id`, if connected.
    pub fn client_id(&self, id: Slot) -> Option<ClientId> {
        self.clients
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .map(|c| c.id)
    }

    /// The phase of a client, if connected.
    pub fn phase(&self, id: Slot) -> Option<Phase> {
        self.clients
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .map(|c| c.phase)
    }

    /// The earliest time [`Core::handle_timeout`] has something to do (a handshake or
    /// frame deadline), or `None`. Calling it earlier is harmless.
    pub fn poll_timeout(&self) -> Option<MonoNanos> {
        match (self.next_deadline, self.gm.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Closes clients that missed a deadline: no HELLO within the handshake timeout of
    /// connecting, or a frame begun and not completed within the stall timeout (bytes
    /// trickling in do not extend it). Spurious calls are no-ops.
    pub fn handle_timeout(&mut self, now: MonoNanos) {
        self.latest = self.latest.max(now);
        // A shared STATS document past its window is not kept (up to `max_frame`).
        if self
            .stats_shared
            .as_ref()
            .is_some_and(|(_, until)| now >= *until)
        {
            self.stats_shared = None;
        }
        let wall = self.wall(now);
        self.gm.handle_timeout(&mut *self.spool, now, wall);
        self.gm_output();
        let hs = self.cfg.handshake_timeout_ms * 1_000_000;
        let stall = self.cfg.stall_timeout_ms * 1_000_000;
        let mut stalled = Vec::new();
        let mut drained = Vec::new();
        let mut next: Option<MonoNanos> = None;
        for (i, c) in self.clients.iter().enumerate() {
            let Some(c) = c else { continue };
            let id = Slot(i as u32);
            if let Some(by) = c.drain_by.filter(|_| c.phase == Phase::Open) {
                if now > by {
                    drained.push(id);
                    continue;
                }
                if next.is_none_or(|n| by < n) {
                    next = Some(by);
                }
            }
            let (deadline, why) = match (c.phase, c.frame_started) {
                (Phase::Handshake, _) => (
                    c.connected_at.add_nanos(hs),
                    "no HELLO within the handshake timeout",
                ),
                (Phase::Login, _) => (
                    c.connected_at.add_nanos(hs),
                    "no AUTH within the handshake timeout",
                ),
                (Phase::Open, Some(start)) => (
                    start.add_nanos(stall),
                    "a frame begun and not completed within the stall timeout",
                ),
                _ => continue,
            };
            if now > deadline {
                stalled.push((id, why));
            } else if next.is_none_or(|n| deadline < n) {
                next = Some(deadline);
            }
        }
        self.next_deadline = next;
        for (id, why) in stalled {
            self.fail(id, ErrorCode::STALLED, why);
        }
        for id in drained {
            let text = format!(
                "slow consumer: an initial image left more than egress_limit ({} bytes) \
                 unread for drain_timeout_ms ({} ms); disconnecting",
                self.cfg.egress_limit, self.cfg.drain_timeout_ms
            );
            // The image is given up at once (not flushed during the linger).
            if let Some(c) = self.clients.get_mut(id.0 as usize).and_then(Option::as_mut) {
                let before = c.egress.capacity();
                c.egress.drop_messages();
                account(&mut self.egress_bytes, before, c.egress.capacity());
            }
            self.fail(id, ErrorCode::SLOW_CONSUMER, &text);
        }
    }

    /// Starts an orderly shutdown: every client gets CLOSE(SHUTTING_DOWN).
    pub fn shutdown(&mut self) {
        for i in 0..self.clients.len() {
            if self.clients[i]
                .as_ref()
                .is_some_and(|c| c.phase != Phase::Closing)
            {
                self.close(
                    Slot(i as u32),
                    ErrorCode::SHUTTING_DOWN,
                    "router shutting down",
                );
            }
        }
    }

    /// Totals so far.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// The stats document sent in STATS_REPLY (see docs/protocol.md). When the
    /// document would not fit in one frame, the client list is cut short and
    /// `clients_omitted` says by how many.
    pub fn stats_json(&self, now: MonoNanos) -> String {
        let mut clients: Vec<ClientStats> = self
            .clients
            .iter()
            .filter_map(|c| Some(c.as_ref()?.stats(now)))
            .collect();
        let limit = self.cfg.max_frame as usize - frame::HEADER_LEN - 4;
        let mut omitted = 0;
        // Then the queues, when the clients alone do not make it fit.
        let mut queues = STATS_MAX_QUEUES;
        loop {
            let json = self.render_stats(now, &clients, omitted, queues);
            if json.len() <= limit {
                return json;
            }
            if !clients.is_empty() {
                let keep = clients.len() / 2;
                omitted += clients.len() - keep;
                clients.truncate(keep);
            } else if queues > 0 {
                queues = queues.min(self.gm.queue_count()) / 2;
            } else {
                // Nothing left to cut (a max_frame too small for the fixed members):
                // say so in a document that fits.
                return format!(
                    "{{\"error\":\"the stats document does not fit in max_frame ({} bytes)\"}}",
                    self.cfg.max_frame
                );
            }
        }
    }

    /// Everything the monitoring endpoint shows, copied out of the core (see
    /// [`crate::monitor`]): built only when the monitoring thread asked for it, at the
    /// driver's timer tick, never per message. A client's patterns are copied only
    /// when they changed since the last snapshot.
    pub fn snapshot(&mut self, now: MonoNanos) -> crate::monitor::Snapshot {
        self.refresh_pattern_views();
        let clients = self
            .clients
            .iter()
            .filter_map(|c| {
                let c = c.as_ref()?;
                let patterns = c.patterns_view.clone().unwrap_or_else(|| Arc::from([]));
                Some(crate::monitor::ClientView {
                    stats: c.stats(now),
                    slow: c.discarding,
                    patterns,
                })
            })
            .collect();
        crate::monitor::Snapshot::new(
            now,
            self.router_stats(now),
            self.cfg.max_clients,
            self.cfg.egress_limit,
            self.groups.len(),
            clients,
            self.spool.enabled().then(|| self.gm.view(usize::MAX)),
        )
        .with_spool(self.spool.usage())
        .with_multicast(self.mcast.stats_json(now))
        .with_cache(self.cache.is_enabled().then(|| {
            (
                self.cache.stats().clone(),
                crate::monitor::CacheConfig {
                    patterns: self.cache.patterns_shared(),
                    depth: self.cfg.cache_depth,
                    max_topics: self.cfg.cache_max_topics,
                    max_bytes: self.cfg.cache_max_bytes,
                },
            )
        }))
    }

    /// Copies the patterns of clients whose subscriptions changed for the snapshot, at
    /// most [`SNAPSHOT_PATTERN_COPIES`] per call (but always one client's, so every
    /// change is copied in time), starting where the last call stopped: a later
    /// client keeps its previous copy until a later snapshot. Before the bound, 300
    /// clients changing 10,000 patterns each made every `/varz` poll hold the loop,
    /// and the messages behind it, up to 79 ms (hostile-input probe).
    fn refresh_pattern_views(&mut self) {
        let n = self.clients.len();
        let mut budget = SNAPSHOT_PATTERN_COPIES;
        let start = self.snapshot_cursor.min(n);
        for i in (start..n).chain(0..start) {
            let Some(c) = self.clients[i].as_mut() else {
                continue;
            };
            if !c.patterns_stale {
                continue;
            }
            if budget == 0 || (c.patterns.len() > budget && budget < SNAPSHOT_PATTERN_COPIES) {
                // Spent: this one is first in line next time.
                self.snapshot_cursor = i;
                return;
            }
            budget = budget.saturating_sub(c.patterns.len());
            c.patterns_view = Some(c.patterns.iter().cloned().collect());
            c.patterns_stale = false;
        }
        self.snapshot_cursor = start;
    }

    fn router_stats(&self, now: MonoNanos) -> RouterStats {
        RouterStats {
            name: self.cfg.name.clone(),
            version: env!("CARGO_PKG_VERSION"),
            listen: self.cfg.listen.to_string(),
            tls_listen: self.cfg.tls_listen.map(|a| format!("tls://{a}")),
            shm: self.cfg.shm.as_ref().map(|n| format!("shm:{n}")),
            idle: self.cfg.idle,
            slow_consumer: self.cfg.slow_consumer,
            started_unix_ms: self.started_unix_ms,
            uptime_ms: now.saturating_sub(self.started) / 1_000_000,
            clients: self.live,
            subscriptions: self.index.len() + self.groups.members_total(),
            closing_clients: self.teardown.len(),
            subscriptions_removing: self.subscriptions_removing(),
            index_nodes: self.index_nodes(),
            max_index_nodes: self.cfg.max_index_nodes,
            match_work: self.match_work(),
            max_match_work: self.cfg.max_match_work,
            egress_bytes: self.egress_bytes,
            egress_memory_limit: self.cfg.egress_memory_limit,
            totals: self.totals.clone(),
        }
    }

    fn render_stats(
        &self,
        now: MonoNanos,
        clients: &[ClientStats],
        omitted: usize,
        max_queues: usize,
    ) -> String {
        let doc = StatsDoc {
            router: self.router_stats(now),
            clients,
            clients_omitted: omitted,
            cache: self.cache.is_enabled().then(|| CacheDoc {
                patterns: self.cache.patterns(),
                depth: self.cfg.cache_depth,
                max_topics: self.cfg.cache_max_topics,
                max_bytes: self.cfg.cache_max_bytes,
                stats: self.cache.stats(),
            }),
            shared_groups: self.groups.len(),
            multicast: self.mcast.stats_json(now),
            guaranteed: self.spool.enabled().then(|| GuaranteedDoc {
                view: self.gm.view(max_queues),
                spool: self.spool.usage(),
            }),
        };
        serde_json::to_string(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    #[inline]
    fn client_mut(&mut self, id: Slot) -> Option<&mut Client> {
        self.clients.get_mut(id.0 as usize).and_then(Option::as_mut)
    }

    /// The user client `id` logged in as (`None`: anonymous, or no such client).
    fn client_user(&self, id: Slot) -> Option<&str> {
        self.clients
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .and_then(|c| c.identity.as_ref())
            .and_then(|i| i.user.as_deref())
    }
}

/// Between a user's name and its publisher identity in the key guaranteed messaging
/// keeps (and the spool stores) for a logged-in user's identity.
pub(crate) const IDENTITY_OWNER_SEP: char = '\u{1f}';

#[derive(Serialize)]
struct StatsDoc<'a> {
    router: RouterStats,
    clients: &'a [ClientStats],
    clients_omitted: usize,
    /// The last-value cache (null when no cache pattern is configured).
    cache: Option<CacheDoc<'a>>,
    /// Shared subscription groups that have members.
    shared_groups: usize,
    /// The multicast streams (`[[router.multicast]]`; empty without): per stream its
    /// group, counters and receivers' flow reports.
    multicast: serde_json::Value,
    /// Queues, publishers and the spool (null when guaranteed messaging is off).
    guaranteed: Option<GuaranteedDoc>,
}

/// The `guaranteed` member: serialized straight from the engine's view (through a
/// `serde_json::Value` it cost ~8 µs per queue).
#[derive(Serialize)]
struct GuaranteedDoc {
    #[serde(flatten)]
    view: crate::gm::GmView,
    spool: serde_json::Value,
}

#[derive(Serialize)]
struct CacheDoc<'a> {
    patterns: &'a [String],
    depth: usize,
    max_topics: usize,
    max_bytes: usize,
    #[serde(flatten)]
    stats: &'a crate::cache::CacheStats,
}

/// The router's identity, configuration summary and totals (the `router` object of the
/// stats document and of the monitoring endpoint's `/varz`).
#[derive(Debug, Clone, Serialize)]
pub struct RouterStats {
    /// Configured name.
    pub name: String,
    /// Crate version.
    pub version: &'static str,
    /// The bound listen address.
    pub listen: String,
    /// The bound TLS listener, when there is one (`tls://ADDR`, as clients give it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_listen: Option<String>,
    /// The shared-memory listener, when there is one (`shm:NAME`, as clients give it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shm: Option<String>,
    /// Idle strategy.
    pub idle: crate::config::IdleStrategy,
    /// Slow-consumer policy.
    pub slow_consumer: SlowConsumerPolicy,
    /// Start time, Unix milliseconds.
    pub started_unix_ms: u64,
    /// Time since the start.
    pub uptime_ms: u64,
    /// Connected clients.
    pub clients: usize,
    /// Subscriptions, all clients (shared-group memberships included; those still
    /// being removed for closed clients too).
    pub subscriptions: usize,
    /// Closed clients whose subscriptions are still being removed from the indexes (a
    /// bounded number per loop turn); each keeps its slot, counted towards
    /// `max_clients`, until the last is gone.
    pub closing_clients: usize,
    /// Their subscriptions still in the indexes (counted in `subscriptions` and, by
    /// their nodes, in `index_nodes`).
    pub subscriptions_removing: usize,
    /// Nodes of the subscription indexes (direct and shared, roots included), against
    /// `max_index_nodes`.
    pub index_nodes: usize,
    /// The configured `max_index_nodes`.
    pub max_index_nodes: usize,
    /// The most steps one topic match can take now, whatever the topic (direct and
    /// shared indexes), against `max_match_work`.
    pub match_work: u64,
    /// The configured `max_match_work`.
    pub max_match_work: u64,
    /// Bytes all clients' egress buffers hold allocated (capacity, not only unwritten
    /// bytes), against `egress_memory_limit`.
    pub egress_bytes: usize,
    /// The configured `egress_memory_limit`.
    pub egress_memory_limit: usize,
    /// Totals over the router's life.
    pub totals: Totals,
}

/// One client's line in the stats document and in the monitoring endpoint's `/connz`.
#[derive(Debug, Clone, Serialize)]
pub struct ClientStats {
    /// The router-assigned id.
    pub id: ClientId,
    /// The name from HELLO.
    pub name: String,
    /// The peer address.
    pub addr: String,
    /// The user it logged in as; absent for an anonymous client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Handshake, login, open or closing.
    pub phase: Phase,
    /// Connect time, Unix milliseconds.
    pub connected_unix_ms: u64,
    /// Time since the connect.
    pub connected_for_ms: u64,
    /// Subscriptions of this client.
    pub subscriptions: usize,
    /// Bytes queued for this client, not yet written.
    pub egress_pending: usize,
    /// Its counters.
    #[serde(flatten)]
    pub counters: ClientCounters,
}

/// The most subscription patterns one monitoring snapshot copies (one client's, if it
/// holds more): a few hundred microseconds of the loop.
const SNAPSHOT_PATTERN_COPIES: usize = 16_384;

/// A drained egress buffer keeps up to this much capacity for the next turn; a larger
/// one is freed at the router-wide bound and by [`Core::release_idle_egress`].
const KEEP_EGRESS: usize = 64 << 10;

/// Keeps the sum of the egress capacities in step with one buffer's change from
/// `before` to `after` bytes (the sum includes `before`; saturating all the same).
#[inline]
fn account(total: &mut usize, before: usize, after: usize) {
    *total = total.saturating_sub(before) + after;
}

/// The levels of a (valid) pattern: what it costs in the subscription index.
fn levels(pattern: &str) -> usize {
    pattern.bytes().filter(|&b| b == b'/').count() + 1
}

impl Client {
    /// Whether this client may hold one more pattern: `max_subscriptions` of them and
    /// `max_subscription_levels` levels in all (each level of a pattern is a node of the
    /// subscription index, a few hundred bytes, unless another pattern shares it).
    /// And the router's index (`index_nodes` now, all clients) may grow by the
    /// pattern's levels within `max_index_nodes`: a pattern adds at most one node per
    /// level, so the check is exact or errs on the safe side.
    fn room_for(&self, pattern: &str, cfg: &Config, index_nodes: usize) -> Result<(), String> {
        let max_subs = cfg.max_subscriptions;
        if self.patterns.len() >= max_subs {
            return Err(format!(
                "at most {max_subs} subscriptions per client (the router's \
                 max_subscriptions)"
            ));
        }
        let max_levels = cfg.max_subscription_levels;
        let n = levels(pattern);
        if self.levels + n > max_levels {
            return Err(format!(
                "at most {max_levels} pattern levels per client in all (this client holds {}, \
                 the pattern has {n}; the router's max_subscription_levels)",
                self.levels
            ));
        }
        let max_nodes = cfg.max_index_nodes;
        if index_nodes + n > max_nodes {
            return Err(format!(
                "the router's subscription index is full: {index_nodes} of at most \
                 {max_nodes} nodes (max_index_nodes, all clients together) in use, the \
                 pattern may add {n}"
            ));
        }
        Ok(())
    }

    /// Whether this client may hold one more shared subscription
    /// (`max_shared_subscriptions`) and, when it would make a new group (`new_group`),
    /// whether the router may hold one more (`max_shared_groups`; `groups` exist now).
    fn room_for_shared(&self, cfg: &Config, new_group: bool, groups: usize) -> Result<(), String> {
        let max = cfg.max_shared_subscriptions;
        if self.shared >= max {
            return Err(format!(
                "at most {max} shared subscriptions per client (the router's \
                 max_shared_subscriptions)"
            ));
        }
        let max_groups = cfg.max_shared_groups;
        if new_group && groups >= max_groups {
            return Err(format!(
                "the router holds {groups} shared-subscription groups, its maximum \
                 (max_shared_groups, all clients together): join an existing group or ask \
                 the operator to raise it"
            ));
        }
        Ok(())
    }

    fn stats(&self, now: MonoNanos) -> ClientStats {
        ClientStats {
            id: self.id,
            name: self.name.clone(),
            addr: self.addr.to_string(),
            user: self
                .identity
                .as_ref()
                .and_then(|i| i.user.as_deref().map(str::to_owned)),
            phase: self.phase,
            connected_unix_ms: self.connected_unix_ms,
            connected_for_ms: now.saturating_sub(self.connected_at) / 1_000_000,
            subscriptions: self.patterns.len(),
            egress_pending: self.egress.pending(),
            counters: self.counters.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_wire::frame::{
        decode, encode_hello, encode_ping, encode_publish, encode_subscribe,
        encode_subscribe_image, encode_unsubscribe, PublishOptions,
    };

    const MS: u64 = 1_000_000;

    fn addr() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    #[test]
    fn a_peer_shows_its_address_or_its_process() {
        assert_eq!(Peer::from(addr()).to_string(), "127.0.0.1:9");
        let shm = Peer::Shm {
            pid: Some(4711),
            uid: Some(1000),
        };
        assert_eq!(shm.to_string(), "shm pid 4711 uid 1000");
        let unknown = Peer::Shm {
            pid: None,
            uid: None,
        };
        assert_eq!(unknown.to_string(), "shm");
        // The stats line carries the same text.
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let Ok(id) = core.handle_accept(shm, MonoNanos(0), UtcNanos(0)) else {
            panic!("refused");
        };
        assert_eq!(core.peer_addr(id), Some(shm));
        let doc: serde_json::Value = serde_json::from_str(&core.stats_json(MonoNanos(0))).unwrap();
        assert_eq!(doc["clients"][0]["addr"], "shm pid 4711 uid 1000");
    }

    /// Hostile-input pass: ~1,100 connections that never sent HELLO, reopened as the
    /// router closed them, held every place and refused 20 of 28 real logins. At the
    /// limit the oldest connection not logged in (100 ms old at least) makes way; a TLS
    /// connection still in its handshake does not (its time starts at the handshake's
    /// end).
    #[test]
    fn at_the_connection_limit_the_oldest_connection_not_logged_in_makes_way() {
        let ms = 1_000_000;
        let cfg = Config {
            max_clients: 3,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let accept =
            |core: &mut Core, at: u64| core.handle_accept(addr(), MonoNanos(at), UtcNanos(0));
        let logged_in = open(&mut core, 0);
        let (Ok(a), Ok(b)) = (accept(&mut core, 0), accept(&mut core, 10 * ms)) else {
            panic!("refused below the limit");
        };
        // Full, and the oldest not logged in is too young: refused as before.
        assert!(accept(&mut core, 90 * ms).is_err());
        assert_eq!(core.totals().refused, 1);
        // 100 ms on: `a` makes way (told why), `b` and the logged-in client stay.
        let Ok(c) = accept(&mut core, 105 * ms) else {
            panic!("not admitted");
        };
        assert_eq!(core.phase(a), Some(Phase::Closing));
        let said = out(&mut core, a);
        assert_eq!(said, ["ERROR too-many-clients true"], "{said:?}");
        assert_eq!(core.phase(b), Some(Phase::Handshake));
        assert_eq!(core.phase(logged_in), Some(Phase::Open));
        assert_eq!(core.totals().evicted_before_login, 1);
        // Not an error of the connection: not counted as one.
        assert_eq!(core.totals().disconnects_error, 0);
        // `c` says HELLO in time: the next one at the limit closes `b`, then nothing
        // is left to close (the logged-in clients hold their places).
        let mut hello = Vec::new();
        encode_hello(&mut hello, PROTOCOL_VERSION, "c");
        core.handle_input(c, MonoNanos(106 * ms), &hello, hello.len());
        assert_eq!(core.phase(c), Some(Phase::Open));
        assert!(accept(&mut core, 120 * ms).is_ok());
        assert_eq!(core.phase(b), Some(Phase::Closing));
        core.handle_closed(a, "closed");
        core.handle_closed(b, "closed");
        assert_eq!(core.live(), 3);
        let d = accept(&mut core, 150 * ms);
        assert!(d.is_err(), "two logged in, one 30 ms old: refused");
        assert_eq!(core.totals().evicted_before_login, 2);
        // A TLS connection in its handshake is passed over however old; once its
        // handshake ended, its own 100 ms count.
        let cfg = Config {
            max_clients: 2,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let (Ok(tls), Ok(plain)) = (accept(&mut core, 0), accept(&mut core, 10 * ms)) else {
            panic!("refused below the limit");
        };
        core.handle_tls_handshaking(tls);
        assert!(
            accept(&mut core, 500 * ms).is_ok(),
            "the plain one makes way"
        );
        assert_eq!(core.phase(plain), Some(Phase::Closing));
        assert_eq!(core.phase(tls), Some(Phase::Handshake));
        core.handle_closed(plain, "closed");
        core.handle_tls_established(tls, MonoNanos(600 * ms));
        // Full again (tls and the newcomer at 500 ms): the newcomer is the one old
        // enough at 650 ms; tls only from 700 ms on.
        assert!(accept(&mut core, 650 * ms).is_ok());
        assert_eq!(core.phase(tls), Some(Phase::Handshake));
        assert!(accept(&mut core, 710 * ms).is_ok());
        assert_eq!(core.phase(tls), Some(Phase::Closing));
    }

    /// New-user pass: a TLS client on the plaintext listener was logged as "the first
    /// frame must be HELLO", which did not point at the port; the reason now says so.
    #[test]
    fn a_tls_client_on_the_plaintext_listener_is_told_apart() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        // A new connection's first bytes: the text of the ERROR that closes it.
        let refusal = |core: &mut Core, first: &[u8]| {
            let Ok(id) = core.handle_accept(addr(), MonoNanos(0), UtcNanos(0)) else {
                panic!("refused");
            };
            assert_eq!(
                core.handle_input(id, MonoNanos(0), first, first.len()),
                Input::Closing
            );
            let bytes = core.egress(id).to_vec();
            let Ok(Some((Frame::Error { text, .. }, _))) = decode(&bytes, u32::MAX) else {
                panic!("no ERROR: {bytes:?}");
            };
            text.to_owned()
        };
        // The start of a ClientHello record: handshake, TLS 1.0 record version.
        let hello = [
            0x16, 0x03, 0x01, 0x00, 0xf4, 0x01, 0x00, 0x00, 0xf0, 0x03, 0x03,
        ];
        let text = refusal(&mut core, &hello);
        assert!(
            text.contains("a TLS client on the plaintext listener"),
            "{text}"
        );
        // Anything else not HELLO keeps the plain reason.
        let mut ping = Vec::new();
        frame::encode_ping(&mut ping, 1);
        assert_eq!(refusal(&mut core, &ping), HELLO_FIRST);
    }

    /// Drains `id`'s egress and decodes it into a debug string per frame.
    fn out(core: &mut Core, id: Slot) -> Vec<String> {
        let bytes = core.egress(id).to_vec();
        core.handle_written(id, bytes.len());
        let mut v = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let (f, n) = decode(&bytes[at..], u32::MAX).unwrap().unwrap();
            v.push(match f {
                Frame::Welcome { .. } => "WELCOME".to_string(),
                Frame::Ack { request_id } => format!("ACK {request_id}"),
                Frame::Error { code, fatal, .. } => format!("ERROR {} {fatal}", code.name()),
                Frame::Message(m) => format!("MSG {}", String::from_utf8_lossy(m.topic)),
                other => format!("{other:?}"),
            });
            at += n;
        }
        v
    }

    fn open(core: &mut Core, now: u64) -> Slot {
        let id = core
            .handle_accept(addr(), MonoNanos(now), UtcNanos(0))
            .ok()
            .unwrap();
        let mut b = Vec::new();
        encode_hello(&mut b, PROTOCOL_VERSION, "t");
        assert_eq!(
            core.handle_input(id, MonoNanos(now), &b, b.len()),
            Input::Consumed(b.len())
        );
        assert_eq!(out(core, id), ["WELCOME"]);
        id
    }

    /// A guaranteed PUBLISH of `x` to `topic` with sequence number `seq`, decoded.
    fn guaranteed_msg(topic: &'static [u8], seq: u64) -> frame::Msg<'static> {
        frame::Msg {
            flags: frame::flags::GUARANTEED | frame::flags::SEQ,
            seq: Some(seq),
            discarded: 0,
            stamps: None,
            reply: None,
            cached: None,
            topic,
            payload: b"x",
        }
    }

    /// The spool stand-in for reclamation: numbers records, reports what the test
    /// says, remembers the reclaims asked for.
    #[derive(Default)]
    struct ReclaimState {
        next: u64,
        progress: std::collections::VecDeque<Progress>,
        reclaims: Vec<u64>,
        /// What `bytes_on_disk` says.
        disk: u64,
    }

    struct ReclaimSpool(std::sync::Arc<std::sync::Mutex<ReclaimState>>);

    impl crate::gm::Log for ReclaimSpool {
        fn append(&mut self, _: &[u8]) -> Result<u64, crate::gm::LogError> {
            let mut s = self.0.lock().unwrap();
            s.next += 1;
            Ok(s.next)
        }
    }

    impl SpoolPort for ReclaimSpool {
        fn enabled(&self) -> bool {
            true
        }
        fn flush(&mut self) {}
        fn poll_progress(&mut self) -> Option<Progress> {
            self.0.lock().unwrap().progress.pop_front()
        }
        fn reclaim(&mut self, below: u64) {
            self.0.lock().unwrap().reclaims.push(below);
        }
        fn usage(&self) -> serde_json::Value {
            serde_json::Value::Null
        }
        fn bytes_on_disk(&self) -> u64 {
            self.0.lock().unwrap().disk
        }
    }

    /// Hostile-input pass: queue creates and deletes in a loop left 315 MB of spool
    /// that nothing reclaimed while no guaranteed message was retained (the segments
    /// went only below the oldest retained message). With nothing retained or pending,
    /// a spool past `UNPINNED_RECLAIM_BYTES` is checkpointed and everything before the
    /// checkpoint reclaimed once it is durable; with no queue or publisher left, every
    /// durable record.
    #[test]
    fn queue_churn_with_nothing_retained_is_reclaimed() {
        use tickwire_wire::gm::QueueOp;
        let state = std::sync::Arc::new(std::sync::Mutex::new(ReclaimState::default()));
        // No replay retention: a message no queue holds is let go at once.
        let cfg = Config {
            retain_bytes: 0,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        core.attach_spool(Box::new(ReclaimSpool(state.clone())));
        core.gm.finish_recovery();
        let churn = |core: &mut Core, n: usize| {
            let spool = &mut *core.spool;
            for _ in 0..n {
                let def = r#"{"name":"c","subscriptions":["c"]}"#;
                core.gm
                    .handle_queue_request(spool, Slot(9), 1, QueueOp::Create, def)
                    .unwrap();
                core.gm
                    .handle_queue_request(spool, Slot(9), 2, QueueOp::Delete, "c")
                    .unwrap();
            }
        };
        let durable = |core: &mut Core, at: MonoNanos| {
            let upto = state.lock().unwrap().next;
            state
                .lock()
                .unwrap()
                .progress
                .push_back(Progress::Durable(upto));
            core.handle_spool(at);
            upto
        };
        churn(&mut core, 50);
        let spool = &mut *core.spool;
        let keep = r#"{"name":"keep","subscriptions":["k"]}"#;
        core.gm
            .handle_queue_request(spool, Slot(9), 3, QueueOp::Create, keep)
            .unwrap();
        let ten_s = 10_000 * MS;
        let end = durable(&mut core, MonoNanos(0));
        assert_eq!(end, 101);
        // A small spool is left alone.
        state.lock().unwrap().disk = UNPINNED_RECLAIM_BYTES - 1;
        core.maybe_reclaim(MonoNanos(ten_s));
        assert_eq!(state.lock().unwrap().next, 101, "no checkpoint");
        // Past the bound: a checkpoint (the one queue left), then, once it is
        // durable, everything before it.
        state.lock().unwrap().disk = UNPINNED_RECLAIM_BYTES;
        core.maybe_reclaim(MonoNanos(2 * ten_s));
        assert_eq!(state.lock().unwrap().next, 102, "the checkpoint");
        assert!(
            state.lock().unwrap().reclaims.is_empty(),
            "before it is durable"
        );
        durable(&mut core, MonoNanos(2 * ten_s + MS));
        core.maybe_reclaim(MonoNanos(2 * ten_s + 2 * MS));
        assert_eq!(state.lock().unwrap().reclaims, [102]);
        // Nothing new since: no further checkpoint.
        core.maybe_reclaim(MonoNanos(3 * ten_s + 3 * MS));
        assert_eq!(state.lock().unwrap().next, 102);
        // No queue left at all: every durable record goes, without a checkpoint.
        churn(&mut core, 10);
        let spool = &mut *core.spool;
        core.gm
            .handle_queue_request(spool, Slot(9), 4, QueueOp::Delete, "keep")
            .unwrap();
        let end = durable(&mut core, MonoNanos(4 * ten_s));
        core.maybe_reclaim(MonoNanos(5 * ten_s));
        assert_eq!(state.lock().unwrap().reclaims, [102, end + 1]);
        // Once a message was stored: a message stored to a queue, delivered,
        // acknowledged and let go leaves nothing retained; the checkpoint's first
        // record carries the next id on through a restart (review: without it ids
        // restarted at 1, and reclaiming was refused once a message was stored), so
        // the churn's records are reclaimed all the same.
        let spool = &mut *core.spool;
        let q = r#"{"name":"m","subscriptions":["m"]}"#;
        core.gm
            .handle_queue_request(spool, Slot(9), 5, QueueOp::Create, q)
            .unwrap();
        core.gm.handle_pub_open(spool, Slot(8), 6, 0, "p").unwrap();
        let m = guaranteed_msg(b"m", 1);
        core.gm
            .handle_publish(spool, Slot(8), UtcNanos(0), 0, &m)
            .unwrap();
        core.gm
            .handle_queue_request(spool, Slot(9), 7, QueueOp::Delete, "m")
            .unwrap();
        durable(&mut core, MonoNanos(6 * ten_s));
        core.handle_timeout(MonoNanos(6 * ten_s + MS));
        assert_eq!(
            core.gm.reclaim_below(),
            u64::MAX,
            "nothing retained or pending"
        );
        assert!(!core.gm.never_stored());
        let next = state.lock().unwrap().next;
        core.maybe_reclaim(MonoNanos(7 * ten_s));
        assert!(state.lock().unwrap().next > next, "a checkpoint");
        durable(&mut core, MonoNanos(7 * ten_s + MS));
        core.maybe_reclaim(MonoNanos(7 * ten_s + 2 * MS));
        assert_eq!(
            state.lock().unwrap().reclaims.last(),
            Some(&(next + 1)),
            "everything before the checkpoint"
        );
    }

    /// Regression: the reclaim tick asked the spool to delete the segments below the
    /// oldest record needed right after appending the checkpoint that replaces their
    /// queue definitions, before that checkpoint was even handed over: a crash in
    /// between lost the definitions. The segments go only once the checkpoint is
    /// durable, and a checkpoint that failed to be written replaces nothing.
    #[test]
    fn segments_go_only_once_the_checkpoint_replacing_them_is_durable() {
        let state = std::sync::Arc::new(std::sync::Mutex::new(ReclaimState::default()));
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        core.attach_spool(Box::new(ReclaimSpool(state.clone())));
        core.gm.finish_recovery();
        let spool = &mut *core.spool;
        core.gm
            .handle_queue_request(
                spool,
                Slot(9),
                1,
                tickwire_wire::gm::QueueOp::Create,
                r#"{"name":"q","subscriptions":["t"]}"#,
            )
            .unwrap();
        core.gm.handle_pub_open(spool, Slot(9), 2, 0, "p").unwrap();
        let m = guaranteed_msg(b"t", 1);
        core.gm
            .handle_publish(spool, Slot(9), UtcNanos(0), 0, &m)
            .unwrap();
        let durable = |upto: u64| {
            state
                .lock()
                .unwrap()
                .progress
                .push_back(Progress::Durable(upto))
        };
        durable(2);
        core.handle_spool(MonoNanos(0));
        assert_eq!(core.gm.reclaim_below(), 2, "the message's record");
        let ten_s = 10_000 * MS;
        core.maybe_reclaim(MonoNanos(ten_s));
        let appended = state.lock().unwrap().next;
        assert!(appended > 2, "a checkpoint was appended");
        assert!(state.lock().unwrap().reclaims.is_empty(), "not durable yet");
        core.maybe_reclaim(MonoNanos(ten_s + MS));
        assert!(state.lock().unwrap().reclaims.is_empty());
        // It fails: nothing goes; the next tick writes another.
        state.lock().unwrap().progress.push_back(Progress::Failed {
            first: 3,
            last: appended,
            why: "the disk is full".into(),
        });
        core.handle_spool(MonoNanos(ten_s + 2 * MS));
        durable(appended);
        core.handle_spool(MonoNanos(ten_s + 2 * MS));
        core.maybe_reclaim(MonoNanos(ten_s + 3 * MS));
        assert!(
            state.lock().unwrap().reclaims.is_empty(),
            "that checkpoint failed"
        );
        core.maybe_reclaim(MonoNanos(2 * ten_s + 3 * MS));
        let again = state.lock().unwrap().next;
        assert!(again > appended, "a second checkpoint");
        assert!(state.lock().unwrap().reclaims.is_empty());
        durable(again);
        core.handle_spool(MonoNanos(2 * ten_s + 4 * MS));
        core.maybe_reclaim(MonoNanos(2 * ten_s + 5 * MS));
        assert_eq!(state.lock().unwrap().reclaims, vec![2]);
    }

    /// Hostile-input pass: the budget counted topics examined only, so an image that
    /// sent every cached message cost what one that matched nothing cost. Now what it
    /// sends is owed too: one unit per message, one per 32 bytes.
    #[test]
    fn what_an_image_sends_is_owed_to_the_budget() {
        let cfg = Config {
            cache: vec![">".into()],
            cache_max_topics: 100,
            image_scan_rate: 100,
            image_scan_rate_total: 1_000_000,
            max_subscriptions: 1,
            ..Config::default()
        };
        let mut core = core_with_100_cached_topics(cfg);
        let query = |core: &mut Core, id: Slot, now: u64, pattern: &str| {
            let mut f = Vec::new();
            encode_subscribe_image(&mut f, 7, pattern, Image::Only);
            core.handle_input(id, MonoNanos(now), &f, f.len());
            let o = out(core, id);
            o.last().cloned().unwrap_or_default()
        };
        let (a, b) = (open(&mut core, 0), open(&mut core, 0));
        // a's image of all 100 messages: 100 topics examined + 100 sent (small ones).
        assert_eq!(query(&mut core, a, 0, ">"), "ACK 7");
        // b's of none: 100 examined.
        assert_eq!(query(&mut core, b, 0, "nothing/>"), "ACK 7");
        // A second later b has its full scan back; a has only repaid what it owed.
        assert_eq!(query(&mut core, b, 1_000 * MS, "nothing/>"), "ACK 7");
        assert_eq!(
            query(&mut core, a, 1_000 * MS, "nothing/>"),
            "ERROR busy false"
        );
        // Its 100 messages (and their bytes) are repaid over the next second or so.
        assert_eq!(query(&mut core, a, 3_000 * MS, "nothing/>"), "ACK 7");
        assert_eq!(image_send_cost(3, 1_000), 3 + 31);
    }

    /// An image examines every cached topic whatever its pattern matches, so the
    /// topics examined are budgeted: a connection asking again and again for a pattern
    /// that matches nothing is answered BUSY once its budget is spent (before any
    /// scan), others keep theirs until the router-wide budget is spent too, and the
    /// budgets refill with time.
    #[test]
    fn image_scans_are_budgeted_per_connection_and_for_the_router() {
        let cfg = Config {
            cache: vec![">".into()],
            cache_max_topics: 100,
            image_scan_rate: 100,
            image_scan_rate_total: 2_000,
            max_subscriptions: 1,
            ..Config::default()
        };
        let mut core = core_with_100_cached_topics(cfg);
        assert_eq!(core.cache.scan_cost("nothing/>"), 100);
        let query = |core: &mut Core, id: Slot, now: u64| {
            let mut f = Vec::new();
            encode_subscribe_image(&mut f, 7, "nothing/>", Image::Only);
            core.handle_input(id, MonoNanos(now), &f, f.len());
            out(core, id)
        };
        let (a, b, c) = (open(&mut core, 0), open(&mut core, 0), open(&mut core, 0));
        // Bursts: one full scan each (cache_max_topics), the router's a tenth of its
        // 2,000 per second: two scans.
        assert_eq!(query(&mut core, a, 0), ["ACK 7"]);
        assert_eq!(query(&mut core, a, 0), ["ERROR busy false"]);
        assert_eq!(query(&mut core, b, 0), ["ACK 7"]);
        assert_eq!(query(&mut core, c, 0), ["ERROR busy false"], "router-wide");
        // Half a second later: a has 50 of its 100 again, the router its 200.
        assert_eq!(query(&mut core, a, 500 * MS), ["ERROR busy false"]);
        assert_eq!(query(&mut core, c, 500 * MS), ["ACK 7"]);
        // A second later still, a has its full scan back; the refusals were counted.
        assert_eq!(query(&mut core, a, 1_500 * MS), ["ACK 7"]);
        assert_eq!(core.cache.stats().images_throttled, 3);
        assert_eq!(core.cache.stats().images, 4);
        // The refused ones were told why.
        let mut f = Vec::new();
        encode_subscribe_image(&mut f, 8, "nothing/>", Image::ThenLive);
        core.handle_input(a, MonoNanos(1_500 * MS), &f, f.len());
        let bytes = core.egress(a).to_vec();
        let Ok(Some((Frame::Error { code, text, .. }, _))) = decode(&bytes, u32::MAX) else {
            panic!("expected an ERROR");
        };
        assert_eq!(code, ErrorCode::BUSY);
        assert!(text.contains("image_scan_rate"), "{text}");
        // Refused whole: a refused ThenLive installs no subscription.
        assert!(core.clients[a.0 as usize]
            .as_ref()
            .unwrap()
            .patterns
            .is_empty());
        // An image refused for another reason (here its subscription: one allowed)
        // spends nothing: the router's 100 left still pay for e's query.
        let e = open(&mut core, 1_500 * MS);
        subscribe(&mut core, e, "x");
        let mut f = Vec::new();
        encode_subscribe_image(&mut f, 9, "y", Image::ThenLive);
        core.handle_input(e, MonoNanos(1_500 * MS), &f, f.len());
        assert_eq!(out(&mut core, e), ["ERROR too-many-subscriptions false"]);
        assert_eq!(query(&mut core, e, 1_500 * MS), ["ACK 7"]);
    }

    /// Hostile-input probe: every monitoring snapshot copied a reference per pattern of
    /// every client (300 clients of 10,000 patterns: 177 ms per `/varz`). Unchanged
    /// subscriptions are now shared with the last snapshot.
    #[test]
    fn a_snapshot_copies_a_clients_patterns_only_when_they_changed() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let a = open(&mut core, 0);
        for i in 0..100 {
            subscribe(&mut core, a, &format!("p/{i}"));
        }
        let first = core.snapshot(MonoNanos(1));
        let second = core.snapshot(MonoNanos(2));
        let (p1, p2) = (&first.clients[0].patterns, &second.clients[0].patterns);
        assert_eq!(p1.len(), 100);
        assert!(Arc::ptr_eq(p1, p2), "copied again though nothing changed");
        subscribe(&mut core, a, "p/new");
        let third = core.snapshot(MonoNanos(3));
        assert_eq!(third.clients[0].patterns.len(), 101);
        assert!(!Arc::ptr_eq(p2, &third.clients[0].patterns));
        assert!(third.clients[0].sorted_patterns().contains(&"p/new"));
    }

    /// Hostile-input probe: clients that each change one of many patterns between
    /// polls made every snapshot copy all of them (300 clients of 10,000: `/varz`
    /// polls held the loop up to 79 ms). A snapshot now copies at most
    /// SNAPSHOT_PATTERN_COPIES patterns (one client's at least), the rest in later
    /// snapshots, in turn: every client's change is seen within a few snapshots.
    #[test]
    fn a_snapshot_copies_a_bounded_number_of_patterns_and_the_rest_later() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let per = 6_000;
        let ids: Vec<Slot> = (0..5).map(|i| open(&mut core, i)).collect();
        for (k, &id) in ids.iter().enumerate() {
            let mut f = Vec::new();
            for i in 0..per {
                encode_subscribe(&mut f, i as u32 + 1, &format!("c{k}/{i}"));
            }
            let mut at = 0;
            while at < f.len() {
                match core.handle_input(id, MonoNanos(1), &f[at..], f.len() - at) {
                    Input::Consumed(n) => at += n,
                    Input::Closing => panic!("closed"),
                }
                // The ACKs, read as they come.
                out(&mut core, id);
            }
        }
        let copied = |snap: &crate::monitor::Snapshot| -> Vec<usize> {
            snap.clients.iter().map(|c| c.patterns.len()).collect()
        };
        // 30,000 patterns changed: two clients' (12,000 <= 16,384) now, the next
        // two, then the last.
        let s1 = core.snapshot(MonoNanos(2));
        assert_eq!(copied(&s1), [per, per, 0, 0, 0]);
        let s2 = core.snapshot(MonoNanos(3));
        assert_eq!(copied(&s2), [per, per, per, per, 0]);
        let s3 = core.snapshot(MonoNanos(4));
        assert_eq!(copied(&s3), [per; 5]);
        // Nothing changed: nothing copied.
        let s4 = core.snapshot(MonoNanos(5));
        for (a, b) in s3.clients.iter().zip(&s4.clients) {
            assert!(Arc::ptr_eq(&a.patterns, &b.patterns));
        }
        // A change of the first client's and the last's: both seen in one snapshot.
        subscribe(&mut core, ids[0], "c0/more");
        subscribe(&mut core, ids[4], "c4/more");
        let s5 = core.snapshot(MonoNanos(6));
        assert_eq!(copied(&s5), [per + 1, per, per, per, per + 1]);
    }

    /// Hostile-input probe: 1,000 clients of the same 10,000 patterns of 250 bytes held
    /// ~3.2 GB in per-client copies. Clients holding the same pattern now share one
    /// copy, which goes with the last of them.
    #[test]
    fn clients_holding_the_same_pattern_share_its_text_which_goes_with_the_last() {
        let unsubscribe = |core: &mut Core, id: Slot, pattern: &str| {
            let mut f = Vec::new();
            frame::encode_unsubscribe(&mut f, 9, pattern);
            core.handle_input(id, MonoNanos(0), &f, f.len());
            assert_eq!(out(core, id), ["ACK 9"]);
        };
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let (a, b) = (open(&mut core, 0), open(&mut core, 0));
        let long = "x".repeat(250);
        subscribe(&mut core, a, &long);
        subscribe(&mut core, b, &long);
        let text = |core: &Core, id: Slot| {
            core.clients[id.0 as usize]
                .as_ref()
                .unwrap()
                .patterns
                .get(long.as_str())
                .unwrap()
                .clone()
        };
        assert!(Arc::ptr_eq(&text(&core, a), &text(&core, b)));
        assert_eq!(core.pattern_text.len(), 1);
        unsubscribe(&mut core, a, &long);
        assert_eq!(core.pattern_text.len(), 1, "b still holds it");
        core.handle_closed(b, "test");
        assert!(core.pattern_text.is_empty());
        // A snapshot holding copies keeps them past their clients; churn sweeps them.
        let c = open(&mut core, 0);
        for i in 0..10 {
            subscribe(&mut core, c, &format!("p/{i}"));
        }
        let snap = core.snapshot(MonoNanos(1));
        core.handle_closed(c, "test");
        assert_eq!(core.pattern_text.len(), 10, "held by the snapshot");
        let d = open(&mut core, 0);
        for i in 0..3_000 {
            subscribe(&mut core, d, &format!("q/{i}"));
            unsubscribe(&mut core, d, &format!("q/{i}"));
        }
        assert!(core.pattern_text.len() <= 10, "{}", core.pattern_text.len());
        drop(snap);
        for i in 0..2_000 {
            subscribe(&mut core, d, &format!("r/{i}"));
        }
        for i in 0..2_000 {
            unsubscribe(&mut core, d, &format!("r/{i}"));
        }
        assert!(
            core.pattern_text.len() <= 1_034,
            "{}",
            core.pattern_text.len()
        );
    }

    /// A core of `cfg` whose cache holds `t/0` to `t/99` (one publisher sent them).
    fn core_with_100_cached_topics(cfg: Config) -> Core {
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let publisher = open(&mut core, 0);
        let mut f = Vec::new();
        for t in 0..100 {
            encode_publish(
                &mut f,
                &format!("t/{t}"),
                b"x",
                Default::default(),
                u32::MAX,
            )
            .unwrap();
        }
        core.handle_input(publisher, MonoNanos(0), &f, f.len());
        core
    }

    /// Hostile-input probe: connections that asked for images larger than
    /// `egress_limit` and never read held the router's egress memory, so every other
    /// image was refused BUSY until they left. An image over the limit must now be read
    /// down to it within `drain_timeout_ms` (a deadline: reading part of it does not
    /// extend it).
    #[test]
    fn an_image_left_unread_past_the_drain_timeout_disconnects_its_client() {
        let cfg = Config {
            cache: vec![">".into()],
            cache_max_topics: 100,
            egress_limit: 500,
            drain_timeout_ms: 30_000,
            ..Config::default()
        };
        let mut core = core_with_100_cached_topics(cfg);
        let ask = |core: &mut Core, id: Slot| {
            let mut f = Vec::new();
            encode_subscribe_image(&mut f, 7, "t/>", Image::Only);
            core.handle_input(id, MonoNanos(MS), &f, f.len());
            core.poll_transmit(&mut Vec::new());
            core.egress(id).len()
        };
        let (idle, nibbler, reader) = (open(&mut core, 0), open(&mut core, 0), open(&mut core, 0));
        for id in [idle, nibbler, reader] {
            assert!(ask(&mut core, id) > 500, "the image is over egress_limit");
        }
        // The deadline is the core's next timeout, so a sleeping driver wakes for it.
        assert!(core
            .poll_timeout()
            .is_some_and(|t| t <= MonoNanos(30_001 * MS)));
        core.handle_written(nibbler, 100);
        let image = out(&mut core, reader);
        assert_eq!(
            image.len(),
            101,
            "100 cached messages and the ACK: {image:?}"
        );
        core.handle_timeout(MonoNanos(30_000 * MS));
        for id in [idle, nibbler, reader] {
            assert_eq!(core.phase(id), Some(Phase::Open), "not before the deadline");
        }
        core.handle_written(nibbler, 100);
        core.handle_timeout(MonoNanos(30_002 * MS));
        let mut expected = Vec::new();
        let text = "slow consumer: an initial image left more than egress_limit (500 bytes) \
                    unread for drain_timeout_ms (30000 ms); disconnecting";
        frame::encode_error(&mut expected, 0, ErrorCode::SLOW_CONSUMER, true, text);
        for id in [idle, nibbler] {
            assert_eq!(core.phase(id), Some(Phase::Closing));
            // The unread image was dropped; only the error (after the rest of a frame
            // partly written) is left to send.
            let left = core.egress(id);
            assert!(left.ends_with(&expected), "{left:?}");
            assert!(
                left.len() < expected.len() + 100,
                "{} bytes left",
                left.len()
            );
        }
        assert_eq!(core.phase(reader), Some(Phase::Open), "it read its image");
        assert_eq!(core.totals().disconnects_error, 2);
    }

    /// Hostile-input probe: a PING or SUBSCRIBE pipelined behind an image larger than
    /// `egress_limit` dropped three quarters of the image (discard) or disconnected the
    /// client at once (disconnect), though the image is queued whole and requests may
    /// be pipelined (protocol.md 5.2, 6.1). Answers behind an image being read now get
    /// their limit on top of what it left unread; a flood of them still meets it.
    #[test]
    fn answers_pipelined_behind_a_large_image_keep_the_image() {
        for policy in [SlowConsumerPolicy::Discard, SlowConsumerPolicy::Disconnect] {
            let cfg = Config {
                cache: vec![">".into()],
                cache_max_topics: 100,
                egress_limit: 500,
                slow_consumer: policy,
                ..Config::default()
            };
            let mut core = core_with_100_cached_topics(cfg);
            let id = open(&mut core, 0);
            let mut f = Vec::new();
            encode_subscribe_image(&mut f, 7, "t/>", Image::ThenLive);
            encode_ping(&mut f, 1);
            encode_subscribe(&mut f, 8, "u/x");
            assert_eq!(
                core.handle_input(id, MonoNanos(MS), &f, f.len()),
                Input::Consumed(f.len())
            );
            let got = out(&mut core, id);
            assert_eq!(got.len(), 103, "{policy:?}: {got:?}");
            assert!(
                got[..100].iter().all(|m| m.starts_with("MSG t/")),
                "{got:?}"
            );
            assert_eq!(got[100], "ACK 7");
            assert!(got[101].starts_with("Pong"), "{got:?}");
            assert_eq!(got[102], "ACK 8");
            assert_eq!(core.phase(id), Some(Phase::Open));
            // Read down to its last 600 bytes (still over the limit, its deadline still
            // running), the image leaves answers that much more room, not its whole
            // size: 40 PONGs (640 bytes) pass 600 + 500.
            let mut f = Vec::new();
            encode_subscribe_image(&mut f, 10, "t/>", Image::Only);
            core.handle_input(id, MonoNanos(MS), &f, f.len());
            let image = core.egress(id).len();
            assert!(image > 2_000, "{image}");
            core.handle_written(id, image - 600);
            let mut f = Vec::new();
            for _ in 0..40 {
                encode_ping(&mut f, 3);
            }
            let discards = core.totals().discards;
            core.handle_input(id, MonoNanos(MS), &f, f.len());
            match policy {
                // The slow-consumer policy: the rest of the image goes to make room.
                SlowConsumerPolicy::Discard => assert!(core.totals().discards > discards),
                SlowConsumerPolicy::Disconnect => {
                    assert_eq!(core.phase(id), Some(Phase::Closing))
                }
            }
            let mut core = core_with_100_cached_topics(Config {
                cache: vec![">".into()],
                cache_max_topics: 100,
                egress_limit: 500,
                slow_consumer: policy,
                ..Config::default()
            });
            let id = open(&mut core, 0);
            // Unread: a flood of PINGs behind a new image is bounded all the same.
            let mut f = Vec::new();
            encode_subscribe_image(&mut f, 9, "t/>", Image::Only);
            for _ in 0..200 {
                encode_ping(&mut f, 2);
            }
            core.handle_input(id, MonoNanos(MS), &f, f.len());
            assert_eq!(core.phase(id), Some(Phase::Closing), "{policy:?}");
        }
    }

    /// Hostile-input probe: a long pattern compares up to its length per cached topic
    /// (a 124-level one cost 20 times a short one's scan), so it counts for more of the
    /// budget; a full budget still pays for one such scan, and the rest is owed.
    #[test]
    fn a_long_patterns_scan_costs_more_of_the_budget_and_is_repaid_at_the_rate() {
        let cfg = Config {
            cache: vec![">".into()],
            cache_max_topics: 100,
            image_scan_rate: 100,
            image_scan_rate_total: 100_000,
            ..Config::default()
        };
        let mut core = core_with_100_cached_topics(cfg);
        let long = format!("t/{}", "*/".repeat(60)) + "q";
        assert_eq!(crate::cache::scan_weight(&long), 8);
        assert_eq!(core.cache.scan_cost(&long), 800);
        let query = |core: &mut Core, id: Slot, pattern: &str, now: u64| {
            let mut f = Vec::new();
            encode_subscribe_image(&mut f, 7, pattern, Image::Only);
            core.handle_input(id, MonoNanos(now), &f, f.len());
            out(core, id)
        };
        let a = open(&mut core, 0);
        // From a full bucket: answered, 700 beyond the burst of 100 owed.
        assert_eq!(query(&mut core, a, &long, 0), ["ACK 7"]);
        // 100 a second: owed until 7 s, then a short scan (100) at 8 s.
        assert_eq!(
            query(&mut core, a, "nothing/>", 7_500 * MS),
            ["ERROR busy false"]
        );
        assert_eq!(query(&mut core, a, "nothing/>", 8_000 * MS), ["ACK 7"]);
    }

    /// A router with a small router-wide egress bound: `clients` may connect, each may
    /// queue `egress_limit`, all together `egress_memory_limit` (share 64 KiB).
    fn memory_limits(policy: SlowConsumerPolicy) -> Config {
        Config {
            max_frame: 2048,
            max_clients: 64,
            egress_limit: 256 << 10,
            egress_memory_limit: 1 << 20,
            slow_consumer: policy,
            ..Config::default()
        }
    }

    fn subscribe(core: &mut Core, id: Slot, pattern: &str) {
        let mut f = Vec::new();
        encode_subscribe(&mut f, 1, pattern);
        core.handle_input(id, MonoNanos(0), &f, f.len());
        assert_eq!(out(core, id), ["ACK 1"]);
    }

    /// Forty subscribers to `>` that never read would hold 40 x 256 KiB = 10 MiB under
    /// their own limits alone; with `egress_memory_limit` at 1 MiB each is cut (or
    /// loses its oldest messages) once it holds more than its share, the buffers stay
    /// within the stated bound, and a subscriber that reads after every message gets
    /// every one of them.
    #[test]
    fn the_router_wide_egress_bound_stops_non_readers_and_spares_a_reader() {
        for policy in [SlowConsumerPolicy::Discard, SlowConsumerPolicy::Disconnect] {
            let cfg = memory_limits(policy);
            let bound = cfg.egress_memory_bound() as usize;
            assert_eq!(cfg.egress_share(), 64 << 10);
            let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
            let hogs: Vec<Slot> = (0..40).map(|_| open(&mut core, 0)).collect();
            for &h in &hogs {
                subscribe(&mut core, h, ">");
            }
            let reader = open(&mut core, 0);
            subscribe(&mut core, reader, ">");
            let publisher = open(&mut core, 0);
            let mut peak = 0;
            let mut received = 0;
            for i in 0..4_000u64 {
                let mut f = Vec::new();
                let size = 100 + (i as usize * 37) % 900;
                let opts = PublishOptions {
                    seq: Some(i),
                    publisher_send: None,
                };
                encode_publish(&mut f, "md/x", &vec![7; size], opts, u32::MAX).unwrap();
                core.handle_input(publisher, MonoNanos(0), &f, f.len());
                received += out(&mut core, reader).len();
                assert_eq!(core.egress_bytes(), core.egress_capacity_scan());
                peak = peak.max(core.egress_bytes());
                assert!(core.egress_bytes() <= bound, "{policy:?} at {i}");
            }
            assert_eq!(received, 4_000, "{policy:?}: the reader got everything");
            assert_eq!(core.phase(reader), Some(Phase::Open));
            let t = core.totals().clone();
            // Without the bound the non-readers alone would hold 40 x 256 KiB.
            assert!(peak < 40 * (256 << 10) / 2, "{policy:?}: peak {peak}");
            match policy {
                SlowConsumerPolicy::Discard => {
                    assert!(t.memory_discards > 0, "{t:?}");
                    assert_eq!(t.memory_disconnects, 0);
                    assert!(hogs.iter().all(|&h| core.phase(h) == Some(Phase::Open)));
                }
                SlowConsumerPolicy::Disconnect => {
                    // All cut; by the router-wide bound except the last few: once fewer
                    // than limit / egress_limit (4) are left, their own limit comes first.
                    assert_eq!(t.disconnects_error, 40, "{t:?}");
                    assert!(t.memory_disconnects >= 40 - 4, "{t:?}");
                    for &h in &hogs {
                        assert_eq!(core.phase(h), Some(Phase::Closing));
                        let last = out(&mut core, h);
                        assert_eq!(last.last().unwrap(), "ERROR slow-consumer true");
                    }
                }
            }
            let doc: serde_json::Value =
                serde_json::from_str(&core.stats_json(MonoNanos(0))).unwrap();
            assert_eq!(doc["router"]["egress_memory_limit"], 1 << 20, "{doc}");
            assert!(doc["router"]["egress_bytes"].as_u64().unwrap() <= bound as u64);
            assert_eq!(
                doc["router"]["totals"]["memory_disconnects"],
                t.memory_disconnects
            );
            // Closing every hog gives all their memory back.
            for &h in &hogs {
                core.handle_closed(h, "test");
            }
            assert_eq!(core.egress_bytes(), core.egress_capacity_scan());
            assert!(
                core.egress_bytes() <= 2 * KEEP_EGRESS,
                "{}",
                core.egress_bytes()
            );
        }
    }

    /// A burst's capacity is not held for ever: a drained buffer above 64 KiB is freed
    /// by the sweep, and at once when it drains while the router-wide bound is reached.
    #[test]
    fn drained_egress_buffers_give_their_memory_back() {
        let cfg = Config {
            egress_memory_limit: 300 << 10,
            max_clients: 8,
            ..memory_limits(SlowConsumerPolicy::Discard)
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let (a, b, p) = (open(&mut core, 0), open(&mut core, 0), open(&mut core, 0));
        subscribe(&mut core, a, "a");
        subscribe(&mut core, b, "b");
        let publish = |core: &mut Core, topic: &str, n: usize| {
            let mut f = Vec::new();
            for _ in 0..n {
                encode_publish(&mut f, topic, &[1; 1000], Default::default(), u32::MAX).unwrap();
            }
            core.handle_input(p, MonoNanos(0), &f, f.len());
        };
        let cap = |core: &Core, id: Slot| {
            core.clients[id.0 as usize]
                .as_ref()
                .unwrap()
                .egress
                .capacity()
        };
        publish(&mut core, "a", 150);
        assert!(cap(&core, a) > KEEP_EGRESS);
        assert_eq!(out(&mut core, a).len(), 150);
        assert!(
            cap(&core, a) > KEEP_EGRESS,
            "under the bound: kept for the next turn"
        );
        core.release_idle_egress();
        assert_eq!(cap(&core, a), 0);
        assert_eq!(core.egress_bytes(), core.egress_capacity_scan());
        // A burst for `a` (unread for now: ~200 KiB in a 256 KiB buffer), then `b`, who
        // does not read, takes the total to the bound.
        publish(&mut core, "a", 200);
        assert!(core.egress_bytes() < 300 << 10);
        for _ in 0..200 {
            publish(&mut core, "b", 1);
            if core.egress_bytes() >= 300 << 10 {
                break;
            }
        }
        assert!(core.egress_bytes() >= 300 << 10, "{}", core.egress_bytes());
        // `a` reads everything: its buffer is freed as it drains.
        assert_eq!(out(&mut core, a).len(), 200);
        assert_eq!(cap(&core, a), 0);
        assert_eq!(core.egress_bytes(), core.egress_capacity_scan());
        assert!(core.egress_bytes() < 300 << 10);
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Client `from` publishes `size` bytes on topic `t/{topic}`.
        Publish { from: usize, topic: u8, size: usize },
        /// The socket of client `to` takes `n` bytes of its egress.
        Write { to: usize, n: usize },
        /// Client `from` sends `n` PINGs (PONGs are control frames).
        Ping { from: usize, n: usize },
        /// Client `from` asks for the stats document (a large control frame).
        Stats { from: usize },
        /// Client `c` goes away and a new one takes a slot.
        Reconnect { c: usize },
        /// The driver's once-a-second sweep.
        Sweep,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            8 => (0..24usize, 0..3u8, 0..2000usize)
                .prop_map(|(from, topic, size)| Op::Publish { from, topic, size }),
            4 => (0..24usize, 0..200_000usize).prop_map(|(to, n)| Op::Write { to, n }),
            1 => (0..24usize, 1..400usize).prop_map(|(from, n)| Op::Ping { from, n }),
            1 => (0..24usize).prop_map(|from| Op::Stats { from }),
            1 => (0..24usize).prop_map(|c| Op::Reconnect { c }),
            1 => Just(Op::Sweep),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Over random pushes, partial writes, control frames, reconnects and sweeps
        /// across 24 clients (three topics, `>` for some), the accounting is exact (the
        /// sum of the buffers' capacities) and never above
        /// `Config::egress_memory_bound`; a client that reads everything after each step
        /// and sends nothing is never cut and never loses a message.
        #[test]
        fn the_egress_memory_bound_holds_over_random_traffic(
            ops in proptest::collection::vec(op(), 1..400),
            memory_limit in 4096usize..(512 << 10),
            egress_limit in 2048usize..(128 << 10),
            max_clients in 26usize..64,
            disconnect in proptest::bool::ANY,
        ) {
            let cfg = Config {
                max_frame: 2048,
                max_clients,
                egress_limit,
                egress_memory_limit: memory_limit,
                slow_consumer: if disconnect {
                    SlowConsumerPolicy::Disconnect
                } else {
                    SlowConsumerPolicy::Discard
                },
                ..Config::default()
            };
            cfg.validate().unwrap();
            let bound = cfg.egress_memory_bound() as usize;
            let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
            let patterns = [">", "t/0", "t/1", "t/2"];
            let connect = |core: &mut Core, i: usize| {
                let id = open(core, 0);
                subscribe(core, id, patterns[i % 4]);
                id
            };
            let mut ids: Vec<Slot> = (0..24).map(|i| connect(&mut core, i)).collect();
            // Client 0 subscribes to `>` and reads everything after every step.
            let mut received = 0u64;
            for op in ops {
                let mut f = Vec::new();
                match op {
                    Op::Publish { from, topic, size } => {
                        let t = format!("t/{topic}");
                        encode_publish(&mut f, &t, &vec![3; size], Default::default(), u32::MAX)
                            .unwrap();
                        core.handle_input(ids[from], MonoNanos(0), &f, f.len());
                    }
                    Op::Write { to, n } => {
                        let n = n.min(core.egress(ids[to]).len());
                        core.handle_written(ids[to], n);
                    }
                    Op::Ping { from, n } if from > 0 => {
                        for token in 0..n as u64 {
                            frame::encode_ping(&mut f, token);
                        }
                        core.handle_input(ids[from], MonoNanos(0), &f, f.len());
                    }
                    Op::Stats { from } if from > 0 => {
                        frame::encode_stats_request(&mut f, 9);
                        core.handle_input(ids[from], MonoNanos(0), &f, f.len());
                    }
                    // Client 0 sends no requests (its answers would count against it).
                    Op::Ping { .. } | Op::Stats { .. } => {}
                    Op::Reconnect { c } if c > 0 => {
                        core.handle_closed(ids[c], "test");
                        ids[c] = connect(&mut core, c);
                    }
                    Op::Reconnect { .. } => {}
                    Op::Sweep => core.release_idle_egress(),
                }
                if core.phase(ids[0]) == Some(Phase::Open) {
                    received += out(&mut core, ids[0])
                        .iter()
                        .filter(|f| f.starts_with("MSG"))
                        .count() as u64;
                }
                proptest::prop_assert_eq!(core.egress_bytes(), core.egress_capacity_scan());
                proptest::prop_assert!(
                    core.egress_bytes() <= bound,
                    "{} > {}",
                    core.egress_bytes(),
                    bound
                );
                // A closed client's slot may go to someone else: finish the closes.
                let mut closing = Vec::new();
                core.poll_closing(&mut closing);
                for id in closing {
                    if id != ids[0] && rand_keep(id) {
                        core.handle_closed(id, "closed");
                        if let Some(i) = ids.iter().position(|&x| x == id) {
                            ids[i] = connect(&mut core, i);
                        }
                    }
                }
            }
            proptest::prop_assert_eq!(core.phase(ids[0]), Some(Phase::Open));
            // Every message routed matched client 0 (`>`): it got each one.
            proptest::prop_assert_eq!(received, core.totals().msgs_in);
            proptest::prop_assert_eq!(core.clients[ids[0].0 as usize].as_ref().unwrap().counters.discards, 0);
        }
    }

    /// Closed clients linger in half the cases (their socket is not yet gone).
    fn rand_keep(id: Slot) -> bool {
        id.0 % 2 == 0
    }

    /// `max_index_nodes` bounds the subscription index of all clients together: a
    /// SUBSCRIBE that could take it beyond is refused (non-fatal) whoever sends it, a
    /// pattern that shares nodes still fits while the bound allows its levels, and an
    /// UNSUBSCRIBE gives the nodes back.
    #[test]
    fn the_index_node_bound_holds_across_clients() {
        let cfg = Config {
            max_index_nodes: 9,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let (a, b) = (open(&mut core, 0), open(&mut core, 0));
        let sub = |core: &mut Core, id: Slot, req: u32, pattern: &str| {
            let mut f = Vec::new();
            encode_subscribe(&mut f, req, pattern);
            core.handle_input(id, MonoNanos(0), &f, f.len());
            out(core, id)
        };
        // The two indexes' roots (direct, shared), a/b/c and x/y: 7 nodes.
        assert_eq!(sub(&mut core, a, 1, "a/b/c"), ["ACK 1"]);
        assert_eq!(sub(&mut core, b, 2, "x/y"), ["ACK 2"]);
        assert_eq!(core.index_nodes(), 7);
        // Three more levels could make 10: refused, and the connection stays open.
        assert_eq!(
            sub(&mut core, b, 3, "p/q/r"),
            ["ERROR too-many-subscriptions false"]
        );
        assert_eq!(core.index_nodes(), 7);
        // Two levels may fit (9; a/d adds one node), then nothing more does, for
        // either client.
        assert_eq!(sub(&mut core, a, 4, "a/d"), ["ACK 4"]);
        assert_eq!(core.index_nodes(), 8);
        assert_eq!(sub(&mut core, b, 5, "m"), ["ACK 5"]);
        assert_eq!(
            sub(&mut core, a, 6, "n"),
            ["ERROR too-many-subscriptions false"]
        );
        assert_eq!(core.index_nodes(), 9);
        // An unsubscribe frees its nodes (b and c; a/d still holds a) for anyone.
        let mut f = Vec::new();
        tickwire_wire::frame::encode_unsubscribe(&mut f, 7, "a/b/c");
        core.handle_input(a, MonoNanos(0), &f, f.len());
        assert_eq!(out(&mut core, a), ["ACK 7"]);
        assert_eq!(core.index_nodes(), 7);
        assert_eq!(sub(&mut core, b, 8, "p/q"), ["ACK 8"]);
        assert_eq!(core.live(), 2);
        let doc: serde_json::Value = serde_json::from_str(&core.stats_json(MonoNanos(0))).unwrap();
        assert_eq!(doc["router"]["index_nodes"], 9, "{doc}");
        assert_eq!(doc["router"]["max_index_nodes"], 9, "{doc}");
    }

    /// Shared subscriptions: at most `max_shared_subscriptions` per client, and at most
    /// `max_shared_groups` groups router-wide (routing visits every matching group), both
    /// refused non-fatally; joining an existing group is allowed at the router's bound,
    /// and a group that goes with its last member makes room.
    #[test]
    fn shared_subscriptions_are_bounded_per_client_and_router_wide() {
        let cfg = Config {
            max_shared_subscriptions: 3,
            max_shared_groups: 4,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let (a, b) = (open(&mut core, 0), open(&mut core, 0));
        let sub = |core: &mut Core, id: Slot, req: u32, pattern: &str, add: bool| {
            let mut f = Vec::new();
            if add {
                encode_subscribe(&mut f, req, pattern);
            } else {
                tickwire_wire::frame::encode_unsubscribe(&mut f, req, pattern);
            }
            core.handle_input(id, MonoNanos(0), &f, f.len());
            out(core, id)
        };
        let refused = ["ERROR too-many-subscriptions false"];
        for (i, g) in ["g1", "g2", "g3"].iter().enumerate() {
            let req = i as u32 + 1;
            assert_eq!(
                sub(&mut core, a, req, &format!("$share/{g}/t"), true),
                [format!("ACK {req}")]
            );
        }
        // a's fourth shared subscription: refused; ordinary ones are not.
        assert_eq!(sub(&mut core, a, 4, "$share/g4/t", true), refused);
        assert_eq!(sub(&mut core, a, 5, "t", true), ["ACK 5"]);
        // b makes the fourth group, then the router holds its maximum: a fifth is refused,
        // joining an existing one is not.
        assert_eq!(sub(&mut core, b, 6, "$share/g4/t", true), ["ACK 6"]);
        assert_eq!(sub(&mut core, b, 7, "$share/g5/t", true), refused);
        assert_eq!(sub(&mut core, b, 8, "$share/g1/t", true), ["ACK 8"]);
        // a leaves g2, its only member: the group goes, and a fifth may be made.
        assert_eq!(sub(&mut core, a, 9, "$share/g2/t", false), ["ACK 9"]);
        assert_eq!(sub(&mut core, b, 10, "$share/g5/t", true), ["ACK 10"]);
        assert_eq!(sub(&mut core, a, 11, "$share/g6/t", true), refused);
        // One copy per client: a (direct and in g1/g3) and b (g4, g5; maybe g1).
        let p = open(&mut core, 0);
        let mut f = Vec::new();
        encode_publish(&mut f, "t", b"x", Default::default(), u32::MAX).unwrap();
        core.handle_input(p, MonoNanos(0), &f, f.len());
        assert_eq!(out(&mut core, a), ["MSG t"]);
        assert_eq!(out(&mut core, b), ["MSG t"]);
        assert_eq!(core.live(), 3);
    }

    /// Patterns that branch at many levels make every topic match walk their prefixes:
    /// a SUBSCRIBE that would take the match bound past `max_match_work` is refused
    /// (non-fatal) and leaves nothing behind; ordinary patterns still fit.
    #[test]
    fn the_match_work_bound_refuses_patterns_that_branch_at_every_level() {
        let cfg = Config {
            max_match_work: 128,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let a = open(&mut core, 0);
        let mut refused = 0;
        let mut req = 0;
        for m in 0u32..64 {
            let levels: Vec<&str> = (0..6)
                .map(|i| if m >> i & 1 == 1 { "*" } else { "a" })
                .collect();
            let mut f = Vec::new();
            req += 1;
            encode_subscribe(&mut f, req, &format!("{}/z", levels.join("/")));
            core.handle_input(a, MonoNanos(0), &f, f.len());
            match out(&mut core, a).as_slice() {
                [ack] if ack == &format!("ACK {req}") => {}
                [err] if err == "ERROR too-many-subscriptions false" => refused += 1,
                other => panic!("{other:?}"),
            }
        }
        assert!(refused > 0, "64 patterns of every mix were all accepted");
        let doc: serde_json::Value = serde_json::from_str(&core.stats_json(MonoNanos(0))).unwrap();
        let work = doc["router"]["match_work"].as_u64().unwrap();
        assert!(work <= 128, "{doc}");
        assert_eq!(doc["router"]["max_match_work"], 128);
        // The client holds exactly what was acknowledged, and literal patterns still fit.
        assert_eq!(doc["clients"][0]["subscriptions"], 64 - refused, "{doc}");
        let mut f = Vec::new();
        encode_subscribe(&mut f, 999, "md/NASDAQ/AAPL/quote");
        core.handle_input(a, MonoNanos(0), &f, f.len());
        assert_eq!(out(&mut core, a), ["ACK 999"]);
        assert_eq!(core.live(), 1);
    }

    #[test]
    fn routes_to_matching_subscribers_only_and_counts() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let (a, b, p) = (open(&mut core, 0), open(&mut core, 0), open(&mut core, 0));
        let mut f = Vec::new();
        encode_subscribe(&mut f, 1, "md/*/AAPL");
        core.handle_input(a, MonoNanos(0), &f, f.len());
        f.clear();
        encode_subscribe(&mut f, 2, "fx/>");
        core.handle_input(b, MonoNanos(0), &f, f.len());
        assert_eq!(out(&mut core, a), ["ACK 1"]);
        assert_eq!(out(&mut core, b), ["ACK 2"]);
        f.clear();
        encode_publish(&mut f, "md/NYSE/AAPL", b"x", Default::default(), u32::MAX).unwrap();
        encode_publish(&mut f, "md/NYSE/IBM", b"x", Default::default(), u32::MAX).unwrap();
        // Split mid-frame: the core takes the whole frames only.
        let cut = f.len() - 3;
        assert!(
            matches!(core.handle_input(p, MonoNanos(0), &f[..cut], cut), Input::Consumed(n) if n < cut)
        );
        assert_eq!(out(&mut core, a), ["MSG md/NYSE/AAPL"]);
        assert!(out(&mut core, b).is_empty());
        assert_eq!(core.totals().msgs_in, 1);
        assert_eq!(core.totals().msgs_out, 1);
    }

    #[test]
    fn router_out_stamp_comes_from_the_injected_clock_and_only_for_stamped_messages() {
        fn fake_clock() -> MonoNanos {
            MonoNanos(777)
        }
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        core.set_stamp_clock(fake_clock);
        let (s, p) = (open(&mut core, 0), open(&mut core, 0));
        let mut f = Vec::new();
        encode_subscribe(&mut f, 1, "t/>");
        core.handle_input(s, MonoNanos(0), &f, f.len());
        assert_eq!(out(&mut core, s), ["ACK 1"]);
        f.clear();
        let stamped = PublishOptions {
            publisher_send: Some(5),
            ..Default::default()
        };
        encode_publish(&mut f, "t/a", b"x", stamped, u32::MAX).unwrap();
        encode_publish(&mut f, "t/b", b"y", Default::default(), u32::MAX).unwrap();
        core.handle_input(p, MonoNanos(100), &f, f.len());
        let bytes = core.egress(s).to_vec();
        let (first, n) = decode(&bytes, u32::MAX).unwrap().unwrap();
        let (second, _) = decode(&bytes[n..], u32::MAX).unwrap().unwrap();
        let (Frame::Message(a), Frame::Message(b)) = (first, second) else {
            panic!("two MESSAGEs expected");
        };
        let st = a.stamps.expect("the stamped message keeps its STAMPS");
        assert_eq!(
            (st.publisher_send, st.router_in, st.router_out),
            (5, 100, 777)
        );
        assert_eq!(b.stamps, None);
    }

    /// An input whose `now` was read before its bytes (the turn's reading): its STAMPS
    /// messages take one clock reading, made at the first of them, as router-in; an
    /// input read with a fresh `now` keeps it. See `Core::set_input_clock_fresh`.
    #[test]
    fn router_in_of_stamped_messages_in_a_stale_input_is_read_once_after_it() {
        use std::sync::atomic::{AtomicU64, Ordering};
        static READS: AtomicU64 = AtomicU64::new(0);
        fn counting_clock() -> MonoNanos {
            MonoNanos(1_000 + READS.fetch_add(1, Ordering::Relaxed))
        }
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        core.set_stamp_clock(counting_clock);
        let (s, p) = (open(&mut core, 0), open(&mut core, 0));
        let mut f = Vec::new();
        encode_subscribe(&mut f, 1, "t/>");
        core.handle_input(s, MonoNanos(0), &f, f.len());
        assert_eq!(out(&mut core, s), ["ACK 1"]);
        let stamped = PublishOptions {
            publisher_send: Some(5),
            ..Default::default()
        };
        let router_in = |core: &mut Core| {
            let bytes = core.egress(s).to_vec();
            let mut at = 0;
            let mut stamps = Vec::new();
            while let Ok(Some((Frame::Message(m), n))) = decode(&bytes[at..], u32::MAX) {
                stamps.push(m.stamps.map(|st| st.router_in));
                at += n;
            }
            core.handle_written(s, bytes.len());
            stamps
        };
        f.clear();
        encode_publish(&mut f, "t/a", b"x", Default::default(), u32::MAX).unwrap();
        encode_publish(&mut f, "t/b", b"y", stamped, u32::MAX).unwrap();
        encode_publish(&mut f, "t/c", b"z", stamped, u32::MAX).unwrap();
        core.set_input_clock_fresh(false);
        core.handle_input(p, MonoNanos(100), &f, f.len());
        // The unstamped one reads no clock; the two stamped ones share one reading.
        assert_eq!(router_in(&mut core), [None, Some(1_000), Some(1_000)]);
        core.set_input_clock_fresh(false);
        core.handle_input(p, MonoNanos(200), &f, f.len());
        // (1,001 and 1,002 were the first input's router-out stamps.)
        assert_eq!(router_in(&mut core), [None, Some(1_003), Some(1_003)]);
        // A fresh `now` is the router-in time itself: no clock read.
        core.set_input_clock_fresh(true);
        core.handle_input(p, MonoNanos(300), &f, f.len());
        assert_eq!(router_in(&mut core), [None, Some(300), Some(300)]);
        // Two router-in readings, and one router-out reading per stamped message.
        assert_eq!(READS.load(Ordering::Relaxed), 2 + 3 * 2);
    }

    #[test]
    fn handshake_and_half_frame_stalls_time_out_with_a_fake_clock() {
        let cfg = Config {
            handshake_timeout_ms: 100,
            stall_timeout_ms: 200,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let mute = core
            .handle_accept(addr(), MonoNanos(0), UtcNanos(0))
            .ok()
            .unwrap();
        let half = open(&mut core, 0);
        core.handle_input(half, MonoNanos(10 * MS), &[50, 0, 0, 0, 0x20], 5);
        assert_eq!(core.poll_timeout(), Some(MonoNanos(100 * MS)));
        core.handle_timeout(MonoNanos(100 * MS));
        assert_eq!(core.phase(mute), Some(Phase::Handshake), "not yet");
        core.handle_timeout(MonoNanos(101 * MS));
        assert_eq!(core.phase(mute), Some(Phase::Closing));
        assert_eq!(out(&mut core, mute), ["ERROR stalled true"]);
        assert_eq!(core.phase(half), Some(Phase::Open), "begun 91 ms ago");
        assert_eq!(core.poll_timeout(), Some(MonoNanos(210 * MS)));
        core.handle_timeout(MonoNanos(211 * MS));
        assert_eq!(core.phase(half), Some(Phase::Closing));
        let mut closing = Vec::new();
        core.poll_closing(&mut closing);
        assert_eq!(closing, [mute, half]);
    }

    #[test]
    fn stats_reply_is_cut_to_fit_one_frame() {
        let cfg = Config {
            max_frame: 2048,
            egress_limit: 1 << 20,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        for _ in 0..50 {
            open(&mut core, 0);
        }
        let json = core.stats_json(MonoNanos(0));
        assert!(json.len() <= 2048 - 12, "{} bytes", json.len());
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        let shown = doc["clients"].as_array().unwrap().len() as u64;
        assert!(shown > 0);
        assert_eq!(shown + doc["clients_omitted"].as_u64().unwrap(), 50);
        assert_eq!(doc["router"]["clients"], 50);
    }

    #[test]
    fn bytes_in_counts_each_byte_once_not_the_unconsumed_buffer_again() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let p = open(&mut core, 0);
        let hello_len = core.totals().bytes_in;
        let mut f = Vec::new();
        encode_publish(&mut f, "a/b", &[7; 100], Default::default(), u32::MAX).unwrap();
        // The frame arrives in three reads; the driver passes the whole unconsumed
        // buffer each time, of which only the tail is new.
        let (a, b) = (10, 60);
        assert_eq!(
            core.handle_input(p, MonoNanos(0), &f[..a], a),
            Input::Consumed(0)
        );
        assert_eq!(
            core.handle_input(p, MonoNanos(0), &f[..b], b - a),
            Input::Consumed(0)
        );
        let n = f.len();
        assert_eq!(
            core.handle_input(p, MonoNanos(0), &f, n - b),
            Input::Consumed(n)
        );
        assert_eq!(core.totals().bytes_in, hello_len + n as u64);
        assert_eq!(core.totals().msgs_in, 1);
    }

    #[test]
    fn client_ids_are_unique_for_the_router_lifetime_though_slots_are_reused() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let first = open(&mut core, 0);
        let id_of = |core: &Core| -> Vec<u64> {
            let doc: serde_json::Value =
                serde_json::from_str(&core.stats_json(MonoNanos(0))).unwrap();
            doc["clients"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["id"].as_u64().unwrap())
                .collect()
        };
        assert_eq!(id_of(&core), [1]);
        core.handle_closed(first, "gone");
        let second = open(&mut core, 0);
        assert_eq!(second, first, "the slot is reused");
        assert_eq!(id_of(&core), [2], "the id is not");
    }

    fn small_limits(policy: SlowConsumerPolicy) -> Config {
        Config {
            max_frame: 1024,
            egress_limit: 4096,
            slow_consumer: policy,
            ..Config::default()
        }
    }

    #[test]
    fn ping_flood_without_reading_is_cut_off_at_the_egress_limit_whatever_the_policy() {
        for policy in [SlowConsumerPolicy::Discard, SlowConsumerPolicy::Disconnect] {
            let mut core = Core::new(small_limits(policy), MonoNanos(0), UtcNanos(0));
            let flooder = open(&mut core, 0);
            let healthy = open(&mut core, 0);
            let mut pings = Vec::new();
            for token in 0..100 {
                frame::encode_ping(&mut pings, token);
            }
            let mut sent = 0;
            while core.phase(flooder) == Some(Phase::Open) && sent < 100 {
                core.handle_input(flooder, MonoNanos(0), &pings, pings.len());
                sent += 1;
                // Bounded by the limit plus the one fatal ERROR.
                assert!(core.egress(flooder).len() <= 4096 + 256, "{policy:?}");
            }
            assert_eq!(core.phase(flooder), Some(Phase::Closing), "{policy:?}");
            // Its unread answers are dropped: the error is the next frame it reads.
            assert_eq!(out(&mut core, flooder), ["ERROR slow-consumer true"]);
            // More input from the flooder is ignored; the other client is untouched.
            assert_eq!(
                core.handle_input(flooder, MonoNanos(0), &pings, pings.len()),
                Input::Closing
            );
            assert!(core.egress(flooder).is_empty());
            assert_eq!(core.phase(healthy), Some(Phase::Open));
            assert_eq!(core.totals().disconnects_error, 1);
        }
    }

    #[test]
    fn pong_backlog_first_discards_the_subscribers_queued_messages_under_discard() {
        let mut core = Core::new(
            small_limits(SlowConsumerPolicy::Discard),
            MonoNanos(0),
            UtcNanos(0),
        );
        let sub = open(&mut core, 0);
        let publisher = open(&mut core, 0);
        let mut f = Vec::new();
        encode_subscribe(&mut f, 1, "t");
        core.handle_input(sub, MonoNanos(0), &f, f.len());
        assert_eq!(out(&mut core, sub), ["ACK 1"]);
        f.clear();
        for _ in 0..30 {
            encode_publish(&mut f, "t", &[0; 100], Default::default(), u32::MAX).unwrap();
        }
        core.handle_input(publisher, MonoNanos(0), &f, f.len());
        let queued = core.egress(sub).len();
        assert!(queued > 3000, "{queued}");
        f.clear();
        for token in 0..100 {
            frame::encode_ping(&mut f, token);
        }
        core.handle_input(sub, MonoNanos(0), &f, f.len());
        assert_eq!(core.phase(sub), Some(Phase::Open), "messages made room");
        assert!(core.totals().discards > 0);
        assert!(core.egress(sub).len() <= 4096);
    }

    #[test]
    fn stats_request_while_the_previous_reply_is_unread_gets_busy_not_another_document() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let id = open(&mut core, 0);
        for _ in 0..20 {
            open(&mut core, 0);
        }
        let mut f = Vec::new();
        frame::encode_stats_request(&mut f, 1);
        frame::encode_stats_request(&mut f, 2);
        frame::encode_stats_request(&mut f, 3);
        core.handle_input(id, MonoNanos(0), &f, f.len());
        let got = out(&mut core, id);
        assert_eq!(got.len(), 3);
        assert!(
            got[0].starts_with("StatsReply { request_id: 1"),
            "{}",
            got[0]
        );
        assert_eq!(got[1..], ["ERROR busy false", "ERROR busy false"]);
        // Read: the next request is answered in full again.
        f.clear();
        frame::encode_stats_request(&mut f, 4);
        core.handle_input(id, MonoNanos(0), &f, f.len());
        let got = out(&mut core, id);
        assert!(
            got[0].starts_with("StatsReply { request_id: 4"),
            "{}",
            got[0]
        );
        assert_eq!(core.phase(id), Some(Phase::Open));
    }

    /// The document of one STATS_REQUEST answers the requests of any client for a time
    /// in proportion to its size (what building it cost), then a fresh one is built:
    /// clients asking one after another cannot keep the loop building documents.
    #[test]
    fn stats_documents_are_shared_for_a_time_in_proportion_to_their_size() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let a = open(&mut core, 0);
        let b = open(&mut core, 0);
        let ask = |core: &mut Core, id: Slot, now: u64, request_id: u32| -> serde_json::Value {
            let mut f = Vec::new();
            frame::encode_stats_request(&mut f, request_id);
            core.handle_input(id, MonoNanos(now), &f, f.len());
            let bytes = core.egress(id).to_vec();
            core.handle_written(id, bytes.len());
            match decode(&bytes, u32::MAX) {
                Ok(Some((
                    Frame::StatsReply {
                        request_id: r,
                        json,
                    },
                    _,
                ))) => {
                    assert_eq!(r, request_id);
                    serde_json::from_str(json).unwrap()
                }
                other => panic!("{other:?}"),
            }
        };
        let first = ask(&mut core, a, 1_000, 1);
        assert_eq!(first["router"]["clients"], 2);
        let len = serde_json::to_string(&first).unwrap().len() as u64;
        let window = len * STATS_SHARE_NS_PER_BYTE;
        assert!(window > 1_000, "{len} bytes");
        // A third client arrives; within the window both clients get the same document.
        open(&mut core, 2_000);
        let shared = ask(&mut core, b, 1_000 + window - 1, 2);
        assert_eq!(shared, first, "the same document, request id apart");
        // After it, a fresh one that counts the third client.
        let fresh = ask(&mut core, a, 1_000 + window, 3);
        assert_eq!(fresh["router"]["clients"], 3);
        // The timer lets go of a document past its window, not of one within it.
        core.handle_timeout(MonoNanos(1_000 + window + 1));
        assert!(core.stats_shared.is_some(), "still within its window");
        core.handle_timeout(MonoNanos(1_000 + window + STATS_SHARE_MAX_NS));
        assert!(core.stats_shared.is_none(), "kept past its window");
    }

    #[test]
    fn byte_trickle_does_not_extend_the_frame_deadline() {
        let cfg = Config {
            stall_timeout_ms: 200,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let trickler = open(&mut core, 0);
        let fine = open(&mut core, 0);
        let mut f = Vec::new();
        encode_publish(&mut f, "a/b", &[7; 1000], Default::default(), u32::MAX).unwrap();
        // One byte every 50 ms, from t = 10 ms: progress all along, never complete.
        let mut t = 10;
        let mut have = 0;
        while have < f.len() - 1 && core.phase(trickler) == Some(Phase::Open) {
            have += 1;
            core.handle_input(trickler, MonoNanos(t * MS), &f[..have], 1);
            // The healthy client completes a frame in two pieces within the timeout.
            core.handle_input(fine, MonoNanos(t * MS), &f[..10], 10);
            core.handle_input(fine, MonoNanos((t + 1) * MS), &f, f.len() - 10);
            core.handle_timeout(MonoNanos(t * MS));
            t += 50;
        }
        assert_eq!(core.phase(trickler), Some(Phase::Closing));
        assert!(t <= 10 + 300, "cut at the first check past 210 ms, t = {t}");
        assert_eq!(
            out(&mut core, trickler).last().unwrap(),
            "ERROR stalled true"
        );
        assert_eq!(core.phase(fine), Some(Phase::Open));
    }

    #[test]
    fn before_hello_only_a_hello_sized_frame_is_accepted() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        assert_eq!(MAX_HELLO_LEN, 80);
        // A HELLO header claiming 1 MiB: refused from the header, nothing buffered.
        let big = core
            .handle_accept(addr(), MonoNanos(0), UtcNanos(0))
            .ok()
            .unwrap();
        assert_eq!(core.frame_limit(big), 80);
        let mut header = (1u32 << 20).to_le_bytes().to_vec();
        header.extend_from_slice(&[frame::Kind::Hello as u8, 0, 0, 0]);
        assert_eq!(
            core.handle_input(big, MonoNanos(0), &header, 8),
            Input::Closing
        );
        assert_eq!(out(&mut core, big), ["ERROR frame-too-large true"]);
        // Another kind: refused from its header too, before its body arrives.
        let other = core
            .handle_accept(addr(), MonoNanos(0), UtcNanos(0))
            .ok()
            .unwrap();
        let mut f = Vec::new();
        encode_publish(&mut f, "a/b", &[7; 5000], Default::default(), u32::MAX).unwrap();
        assert_eq!(
            core.handle_input(other, MonoNanos(0), &f[..8], 8),
            Input::Closing
        );
        assert_eq!(out(&mut core, other), ["ERROR handshake true"]);
        // After HELLO the configured max_frame applies.
        let ok = open(&mut core, 0);
        assert_eq!(core.frame_limit(ok), Config::default().max_frame);
    }

    #[test]
    fn connection_limit_refuses_with_an_error_frame() {
        let cfg = Config {
            max_clients: 1,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        open(&mut core, 0);
        let Err(Refused(bytes)) = core.handle_accept(addr(), MonoNanos(0), UtcNanos(0)) else {
            panic!("accepted beyond the limit")
        };
        let (f, _) = decode(&bytes, u32::MAX).unwrap().unwrap();
        assert!(matches!(
            f,
            Frame::Error {
                code: ErrorCode::TOO_MANY_CLIENTS,
                fatal: true,
                ..
            }
        ));
        assert_eq!(core.totals().refused, 1);
    }

    /// Feeds `input` whole, again and again while the core pauses at its subscription
    /// work bound (as the driver does, a turn apart); returns the number of calls.
    fn feed_paused(core: &mut Core, id: Slot, input: &[u8]) -> usize {
        let mut at = 0;
        let mut calls = 0;
        loop {
            calls += 1;
            let Input::Consumed(used) = core.handle_input(id, MonoNanos(0), &input[at..], 0) else {
                panic!("closing");
            };
            at += used;
            if !core.input_paused() {
                assert_eq!(at, input.len(), "stopped without pausing");
                return calls;
            }
            assert!(used > 0, "a paused call consumed nothing");
        }
    }

    /// Hostile-input probe: one client sending SUBSCRIBE/UNSUBSCRIBE pairs without
    /// pause held the loop for a read buffer of them at a time (~6,000 frames, tens of
    /// ms), so every other client waited. A call now stops at
    /// `SUBSCRIPTION_WORK_PER_READ` (1 + levels per frame) and leaves the rest, whole
    /// frames in order, for the next turn.
    #[test]
    fn one_read_of_subscriptions_is_handled_a_bounded_part_per_turn_in_order() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let a = open(&mut core, 0);
        let patterns: Vec<String> = (0..1000).map(ten_levels).collect();
        let mut f = Vec::new();
        for p in &patterns {
            encode_subscribe(&mut f, 1, p);
        }
        for p in &patterns {
            encode_unsubscribe(&mut f, 2, p);
        }
        encode_subscribe(&mut f, 3, "last");
        encode_ping(&mut f, 7);
        // The first call: 640 / 11 → 59 frames, the rest left whole.
        let Input::Consumed(used) = core.handle_input(a, MonoNanos(0), &f, f.len()) else {
            panic!("closing");
        };
        assert!(core.input_paused());
        let acks = out(&mut core, a);
        assert_eq!(acks.len(), 59, "{acks:?}");
        assert_eq!(core.index.len(), 59);
        let calls = feed_paused(&mut core, a, &f[used..]);
        // 59 frames of 11 a call (the 59th reaches 649 ≥ 640): the 1,941 left of 11,
        // then "last" and the PING, in 33 more calls.
        assert_eq!(calls, 33);
        let rest = out(&mut core, a);
        assert_eq!(rest.len(), 2001 - 59 + 1);
        assert!(rest[..1000 - 59].iter().all(|r| r == "ACK 1"));
        assert!(rest[1000 - 59..2000 - 59].iter().all(|r| r == "ACK 2"));
        assert_eq!(rest[2000 - 59], "ACK 3");
        assert!(rest[2001 - 59].starts_with("Pong"), "{:?}", rest[2001 - 59]);
        assert_eq!(core.index.len(), 1);
        // Pings are not bounded this way (a read buffer of them is the unit): a call
        // takes them all.
        let mut f = Vec::new();
        for _ in 0..1000 {
            encode_ping(&mut f, 1);
        }
        assert_eq!(
            core.handle_input(a, MonoNanos(0), &f, f.len()),
            Input::Consumed(f.len())
        );
        assert!(!core.input_paused());
    }

    /// Hostile-input probe: a read buffer of small PUBLISHes to a topic 300 clients
    /// subscribe to was routed in one call (~7 million copies), and every other
    /// client's PING waited hundreds of ms. A call now stops once its routing work (1
    /// per PUBLISH + 1 per client matched) reaches `DELIVERY_WORK_PER_READ`, right after
    /// that PUBLISH, and leaves the rest, whole and in order, for the next turn; an
    /// ordinary 1 → 1 read is still taken whole.
    #[test]
    fn one_read_of_publishes_is_routed_a_bounded_part_per_turn_in_order() {
        // Nothing is discarded here: every message must arrive.
        let cfg = || Config {
            egress_limit: 64 << 20,
            ..Config::default()
        };
        let mut core = Core::new(cfg(), MonoNanos(0), UtcNanos(0));
        let publisher = open(&mut core, 0);
        let subs: Vec<Slot> = (0..3).map(|_| open(&mut core, 0)).collect();
        for &s in &subs {
            subscribe(&mut core, s, "t/>");
        }
        let mut f = Vec::new();
        for i in 0..20_000 {
            let topic = format!("t/{i}");
            encode_publish(&mut f, &topic, b"x", PublishOptions::default(), u32::MAX).unwrap();
        }
        // 4 units each (the PUBLISH and its 3 copies): 8,192 PUBLISHes reach 32,768.
        let Input::Consumed(used) = core.handle_input(publisher, MonoNanos(0), &f, f.len()) else {
            panic!("closing");
        };
        assert!(core.input_paused());
        let first: Vec<Vec<String>> = subs.iter().map(|&s| out(&mut core, s)).collect();
        assert!(first.iter().all(|m| m.len() == 8192), "{}", first[0].len());
        // The rest: 8,192 then 3,616, two more calls (a turn apart in the driver).
        assert_eq!(feed_paused(&mut core, publisher, &f[used..]), 2);
        let want: Vec<String> = (0..20_000).map(|i| format!("MSG t/{i}")).collect();
        for (s, mut got) in subs.iter().zip(first) {
            got.extend(out(&mut core, *s));
            assert!(got == want, "every message, once, in order");
        }
        // 1 → 1: a whole read of 100-byte messages (256 KiB, ~1,900 of 2 units each)
        // in one call, not paused.
        let mut core = Core::new(cfg(), MonoNanos(0), UtcNanos(0));
        let publisher = open(&mut core, 0);
        let sub = open(&mut core, 0);
        subscribe(&mut core, sub, "t/>");
        let mut one = Vec::new();
        encode_publish(
            &mut one,
            "t/x",
            &[0; 100],
            PublishOptions::default(),
            u32::MAX,
        )
        .unwrap();
        let f = one.repeat((256 << 10) / one.len());
        assert_eq!(
            core.handle_input(publisher, MonoNanos(0), &f, f.len()),
            Input::Consumed(f.len())
        );
        assert!(!core.input_paused());
        assert_eq!(out(&mut core, sub).len(), f.len() / one.len());
    }

    /// Hostile-input pass: one client made 10,000 queues on one pattern and published
    /// a window of guaranteed messages matching it in one burst: ~41 million queue
    /// inserts in one call, and every other client waited 1.3 s. Each queue a
    /// guaranteed PUBLISH is stored for counts against `DELIVERY_WORK_PER_READ` as a
    /// subscriber does, so the call pauses and the rest, in order, waits for the next
    /// turns.
    #[test]
    fn guaranteed_publishes_to_many_queues_are_stored_a_bounded_part_per_turn() {
        let state = std::sync::Arc::new(std::sync::Mutex::new(ReclaimState::default()));
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        core.attach_spool(Box::new(ReclaimSpool(state.clone())));
        core.gm.finish_recovery();
        let publisher = open(&mut core, 0);
        let spool = &mut *core.spool;
        for i in 0..2_000 {
            let def = format!(r#"{{"name":"q{i}","subscriptions":["g/>"]}}"#);
            core.gm
                .handle_queue_request(spool, Slot(99), 1, tickwire_wire::gm::QueueOp::Create, &def)
                .unwrap();
        }
        core.gm
            .handle_pub_open(spool, publisher, 2, 0, "p")
            .unwrap();
        let appended = || state.lock().unwrap().next;
        let before = appended();
        let mut f = Vec::new();
        for seq in 1..=100 {
            let at = f.len();
            let opts = PublishOptions {
                seq: Some(seq),
                publisher_send: None,
            };
            encode_publish(&mut f, "g/x", b"m", opts, u32::MAX).unwrap();
            f[at + 5] |= frame::flags::GUARANTEED;
        }
        let Input::Consumed(used) = core.handle_input(publisher, MonoNanos(0), &f, f.len()) else {
            panic!("closing");
        };
        // 1 + 2,000 units each: the 17th reaches 32,768.
        assert!(core.input_paused() && used < f.len());
        assert_eq!(appended() - before, 17, "stored in the first call");
        assert_eq!(feed_paused(&mut core, publisher, &f[used..]), 5);
        assert_eq!(appended() - before, 100, "every publish stored, once");
    }

    /// Review: a read that completed a frame begun long ago and then stopped at the
    /// routing bound kept that frame's start as the stall deadline's, so a timeout
    /// check between the pause and the next turn cut a client whose every frame was
    /// whole. The pause now restarts the deadline at the read.
    #[test]
    fn a_routing_pause_does_not_keep_an_old_frame_stall_deadline() {
        let cfg = Config {
            stall_timeout_ms: 200,
            egress_limit: 64 << 20,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let publisher = open(&mut core, 0);
        let subs: Vec<Slot> = (0..3).map(|_| open(&mut core, 0)).collect();
        for &s in &subs {
            subscribe(&mut core, s, "t/>");
        }
        let mut f = Vec::new();
        for i in 0..20_000 {
            let topic = format!("t/{i}");
            encode_publish(&mut f, &topic, b"x", PublishOptions::default(), u32::MAX).unwrap();
        }
        // The first frame's first 3 bytes at 0 ms, the rest at 150 ms (a partial frame
        // 150 ms old, within the 200 ms stall timeout).
        assert_eq!(
            core.handle_input(publisher, MonoNanos(0), &f[..3], 3),
            Input::Consumed(0)
        );
        let Input::Consumed(used) =
            core.handle_input(publisher, MonoNanos(150 * MS), &f, f.len() - 3)
        else {
            panic!("closing");
        };
        assert!(core.input_paused() && used < f.len());
        // Past the old frame's deadline (200 ms), before the next turn resumes.
        core.handle_timeout(MonoNanos(250 * MS));
        assert_eq!(core.phase(publisher), Some(Phase::Open), "cut while paused");
        assert_eq!(feed_paused(&mut core, publisher, &f[used..]), 2);
        assert_eq!(core.phase(publisher), Some(Phase::Open));
    }

    /// `p{i}/l1/.../l9`: a pattern of ten levels, distinct from the first (its removal
    /// frees ten trie nodes).
    fn ten_levels(i: usize) -> String {
        format!("p{i}/l1/l2/l3/l4/l5/l6/l7/l8/l9")
    }

    /// Subscribes `id` to every pattern in one read, fed again while the core pauses
    /// at its work bound, as the driver does; the ACKs are drained.
    fn subscribe_all(core: &mut Core, id: Slot, patterns: &[String]) {
        let mut f = Vec::new();
        for p in patterns {
            encode_subscribe(&mut f, 1, p);
        }
        feed_paused(core, id, &f);
        let acks = out(core, id);
        assert_eq!(acks.len(), patterns.len());
        assert!(acks.iter().all(|a| a == "ACK 1"), "{acks:?}");
    }

    fn publish(core: &mut Core, id: Slot, topic: &str) {
        let mut f = Vec::new();
        encode_publish(&mut f, topic, b"x", Default::default(), u32::MAX).unwrap();
        assert_eq!(
            core.handle_input(id, MonoNanos(0), &f, f.len()),
            Input::Consumed(f.len())
        );
    }

    /// Regression (hostile-input probe, docs/security.md): a client closing with
    /// 10,000 patterns had them all removed from the index in one call (~60 ms in a
    /// release build, every other client waiting). Now a turn removes at most
    /// `TEARDOWN_PATTERNS_PER_TURN` (64) of them; between turns
    /// another client's messages reach their subscriber, the closing client gets none,
    /// and its slot is not handed to a new connection until its last pattern is gone.
    #[test]
    fn closing_with_10000_patterns_tears_them_down_a_bounded_number_per_turn() {
        let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
        let a = open(&mut core, 0);
        let patterns: Vec<String> = (0..10_000).map(ten_levels).collect();
        subscribe_all(&mut core, a, &patterns);
        let (c, p) = (open(&mut core, 0), open(&mut core, 0));
        let topic = ten_levels(5);
        subscribe(&mut core, c, &topic);
        assert_eq!(core.index.len(), 10_001);
        assert_eq!(core.index.node_count(), 1 + 100_000);
        let per_turn = TEARDOWN_PATTERNS_PER_TURN;
        // The turns of those subscribes end (each may tear down as many as it
        // subscribed; here nothing is closing yet).
        let mut closing = Vec::new();
        core.poll_closing(&mut closing);
        // The router closes it (CLOSE queued; its socket is still open)...
        core.close(a, ErrorCode::NORMAL, "bye");
        assert_eq!(
            core.index.len(),
            10_001 - per_turn,
            "a close spends what is left of the turn's budget at once"
        );
        assert!(core.has_pending_teardown());
        let mut turns = 0;
        let mut newcomer = None;
        while core.has_pending_teardown() {
            publish(&mut core, p, &topic);
            assert_eq!(out(&mut core, c), [format!("MSG {topic}")]);
            let to_a = out(&mut core, a);
            assert!(to_a.iter().all(|f| !f.starts_with("MSG")), "{to_a:?}");
            let before = core.index.len();
            core.poll_closing(&mut closing);
            turns += 1;
            assert!(
                before - core.index.len() <= per_turn,
                "turn {turns}: {} removed",
                before - core.index.len()
            );
            if turns == 1 {
                let stats = core.router_stats(MonoNanos(0));
                assert_eq!(stats.closing_clients, 1);
                assert_eq!(
                    stats.subscriptions_removing,
                    core.index.len() - 1,
                    "what is left to remove is shown (all but c's pattern)"
                );
                assert!(stats.subscriptions_removing >= 10_000 - 2 * per_turn);
            }
            if turns == 10 {
                // ...and its socket goes: the slot stays held while patterns remain.
                core.handle_closed(a, "closed");
                assert_eq!(core.phase(a), None);
                assert_eq!(core.held, 1);
                let d = open(&mut core, 0);
                assert_ne!(d, a, "a slot waiting for its teardown is not reused");
                newcomer = Some(d);
            }
        }
        assert_eq!(closing, [a]);
        let stats = core.router_stats(MonoNanos(0));
        assert_eq!(
            (stats.closing_clients, stats.subscriptions_removing),
            (0, 0)
        );
        // The close had spent the first turn's budget; then 64 a turn.
        assert_eq!(turns, 1 + (10_000 - per_turn).div_ceil(per_turn));
        assert_eq!(core.index.len(), 1, "c's pattern only");
        assert_eq!(core.index.node_count(), 1 + 10);
        assert_eq!((core.held, core.live()), (0, 3));
        assert_eq!(core.phase(newcomer.unwrap()), Some(Phase::Open));
        assert_eq!(open(&mut core, 0), a, "the slot is free again");
        // The last subscriber leaves (within a turn's budget: at once).
        core.handle_closed(c, "gone");
        assert!(!core.has_pending_teardown());
        assert!(core.index.is_empty());
        assert_eq!(core.index.node_count(), 1);
        assert!(core.pattern_text.is_empty());
    }

    /// A SUBSCRIBE refused at `max_index_nodes` while a closed client's patterns are
    /// still being removed says so (the nodes come back within a few turns), and is
    /// taken once they are gone.
    #[test]
    fn a_refusal_at_the_index_bound_says_when_closed_clients_still_hold_nodes() {
        let cfg = Config {
            max_index_nodes: 2 + 100,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let (a, b) = (open(&mut core, 0), open(&mut core, 0));
        let patterns: Vec<String> = (0..100).map(|i| format!("p{i}")).collect();
        subscribe_all(&mut core, a, &patterns);
        assert_eq!(core.index_nodes(), 102);
        core.close(a, ErrorCode::NORMAL, "bye");
        core.handle_closed(a, "closed");
        assert!(core.has_pending_teardown());
        // The close freed one turn's budget (64 nodes): 38 in use, and 70 more would
        // pass the bound until the other 36 are gone.
        let deep = vec!["a"; 70].join("/");
        let mut f = Vec::new();
        encode_subscribe(&mut f, 9, &deep);
        core.handle_input(b, MonoNanos(0), &f, f.len());
        let bytes = core.egress(b).to_vec();
        core.handle_written(b, bytes.len());
        match decode(&bytes, u32::MAX).unwrap().unwrap().0 {
            Frame::Error {
                code, fatal, text, ..
            } => {
                assert_eq!(code, ErrorCode::TOO_MANY_SUBSCRIPTIONS);
                assert!(!fatal);
                assert!(
                    text.contains("subscription index is full")
                        && text.contains("subscriptions of closed clients are still being removed"),
                    "{text}"
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        let mut closing = Vec::new();
        while core.has_pending_teardown() {
            core.poll_closing(&mut closing);
        }
        core.handle_input(b, MonoNanos(0), &f, f.len());
        assert_eq!(out(&mut core, b), ["ACK 9"]);
    }

    /// Hostile-input pass: four connections subscribing up to the per-read bound every
    /// turn and closing every few turns added patterns ~3.6x faster than a turn's
    /// teardown removed closing clients' ones, so the backlog (and the slots it held)
    /// grew without end and a 100-client router refused every newcomer. The teardown
    /// now also removes as many as were subscribed in the turn: the backlog stays
    /// within what the churners subscribed before their last close.
    #[test]
    fn subscribe_and_close_churn_cannot_outpace_the_teardown() {
        let cfg = Config {
            max_clients: 100,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let p = open(&mut core, 0);
        let mut churners: Vec<Slot> = (0..4).map(|_| open(&mut core, 0)).collect();
        // Patterns a read may subscribe: SUBSCRIPTION_WORK_PER_READ / (1 + 10 levels).
        let per_read = (SUBSCRIPTION_WORK_PER_READ / 11) as usize;
        let mut next = 0;
        let mut closing = Vec::new();
        let mut most_removing = 0;
        for turn in 0..400 {
            for c in &churners {
                let mut f = Vec::new();
                for _ in 0..per_read {
                    encode_subscribe(&mut f, 1, &ten_levels(next));
                    next += 1;
                }
                assert_eq!(
                    core.handle_input(*c, MonoNanos(0), &f, f.len()),
                    Input::Consumed(f.len())
                );
                let _ = out(&mut core, *c);
            }
            if turn % 5 == 4 {
                for c in &mut churners {
                    core.handle_closed(*c, "gone");
                    *c = open(&mut core, 0);
                }
            }
            core.poll_closing(&mut closing);
            let removing = core.router_stats(MonoNanos(0)).subscriptions_removing;
            most_removing = most_removing.max(removing);
            // The others are served all along.
            publish(&mut core, p, "q");
        }
        // Before: ~170 more patterns in the backlog every turn (~68,000 after 400
        // turns), and the held slots with them.
        let one_round = 4 * 5 * per_read;
        assert!(
            most_removing <= one_round,
            "{most_removing} patterns waiting for removal (one round of churn is {one_round})"
        );
        assert!(core.held <= 4, "{} slots held by closed clients", core.held);
    }

    /// A slot waiting for its teardown counts towards `max_clients`, so churning
    /// connections cannot make the router hold more than `max_clients` clients'
    /// subscriptions; shared subscriptions are torn down in the same turns, and a
    /// group's other member gets the group's messages meanwhile.
    #[test]
    fn a_slot_waiting_for_its_teardown_counts_towards_the_connection_limit() {
        let cfg = Config {
            max_clients: 3,
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let (a, b, p) = (open(&mut core, 0), open(&mut core, 0), open(&mut core, 0));
        let mut patterns: Vec<String> = (0..1_000).map(ten_levels).collect();
        patterns.extend((0..50).map(|i| format!("$share/g{i}/s/{i}")));
        subscribe_all(&mut core, a, &patterns);
        subscribe(&mut core, b, "$share/g0/s/0");
        assert_eq!((core.groups.len(), core.groups.members_total()), (50, 51));
        // The turn of those subscribes ends (its teardown may remove as many).
        let mut closing = Vec::new();
        core.poll_closing(&mut closing);
        core.handle_closed(a, "gone");
        assert_eq!((core.live(), core.held), (2, 1));
        let Err(Refused(bytes)) = core.handle_accept(addr(), MonoNanos(0), UtcNanos(0)) else {
            panic!("accepted while a held slot makes the limit")
        };
        let (f, _) = decode(&bytes, u32::MAX).unwrap().unwrap();
        let Frame::Error {
            code: ErrorCode::TOO_MANY_CLIENTS,
            fatal: true,
            text,
            ..
        } = f
        else {
            panic!("{f:?}")
        };
        assert!(
            text.contains("still having their subscriptions removed"),
            "{text}"
        );
        let mut turns = 0;
        while core.has_pending_teardown() {
            publish(&mut core, p, "s/0");
            assert_eq!(out(&mut core, b), ["MSG s/0"]);
            core.poll_closing(&mut closing);
            turns += 1;
        }
        assert!(turns > 1_000 / (TEARDOWN_PATTERNS_PER_TURN), "{turns}");
        assert_eq!((core.groups.len(), core.groups.members_total()), (1, 1));
        assert_eq!(core.groups.node_count(), 1 + 2, "$share/g0/s/0's s/0");
        assert!(core.index.is_empty());
        assert_eq!(core.index.node_count(), 1);
        assert_eq!(open(&mut core, 0), a, "free again, and reused");
    }

    /// The same for its user's connection limit: a closed connection whose
    /// subscriptions are still being removed counts for its user until they are, so
    /// one user churning connections holds at most its limit's worth of them.
    #[test]
    fn a_slot_waiting_for_its_teardown_counts_for_its_user() {
        let cfg = Config {
            auth: crate::auth::AuthConfig {
                anonymous_max_connections: Some(2),
                ..Default::default()
            },
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let (a, _b) = (open(&mut core, 0), open(&mut core, 0));
        let patterns: Vec<String> = (0..1_000).map(ten_levels).collect();
        subscribe_all(&mut core, a, &patterns);
        core.handle_closed(a, "gone");
        let hello = |core: &mut Core| {
            let id = core
                .handle_accept(addr(), MonoNanos(0), UtcNanos(0))
                .ok()
                .unwrap();
            let mut b = Vec::new();
            encode_hello(&mut b, PROTOCOL_VERSION, "t");
            core.handle_input(id, MonoNanos(0), &b, b.len());
            (id, out(core, id))
        };
        let (late, answer) = hello(&mut core);
        assert_eq!(answer, ["ERROR auth-failed true"]);
        core.handle_closed(late, "refused");
        let mut closing = Vec::new();
        while core.has_pending_teardown() {
            core.poll_closing(&mut closing);
        }
        let (_, answer) = hello(&mut core);
        assert_eq!(answer, ["WELCOME"]);
    }

    #[test]
    fn multicast_clients_learn_the_streams_before_welcome_and_are_not_sent_them_over_tcp() {
        let cfg = Config {
            multicast: vec![
                crate::mcast::MulticastRoute::parse_flag("239.255.74.9:7449=md/>").unwrap(),
            ],
            ..Config::default()
        };
        let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
        let tcp = open(&mut core, 0);
        let mc = core
            .handle_accept(addr(), MonoNanos(0), UtcNanos(0))
            .ok()
            .unwrap();
        let mut f = Vec::new();
        frame::encode_hello_caps(&mut f, PROTOCOL_VERSION, caps::MCAST, "m");
        core.handle_input(mc, MonoNanos(0), &f, f.len());
        let hello = out(&mut core, mc);
        assert_eq!(hello.len(), 2, "{hello:?}");
        assert!(hello[0].starts_with("McastRoute"), "{hello:?}");
        assert_eq!(hello[1], "WELCOME");
        for (id, p) in [(tcp, "md/>"), (tcp, "fx/>"), (mc, "md/>"), (mc, "fx/>")] {
            f.clear();
            encode_subscribe(&mut f, 1, p);
            core.handle_input(id, MonoNanos(0), &f, f.len());
        }
        out(&mut core, tcp);
        out(&mut core, mc);
        f.clear();
        encode_publish(&mut f, "md/a", b"x", Default::default(), u32::MAX).unwrap();
        encode_publish(&mut f, "fx/a", b"x", Default::default(), u32::MAX).unwrap();
        core.handle_input(tcp, MonoNanos(0), &f, f.len());
        assert_eq!(out(&mut core, tcp), ["MSG md/a", "MSG fx/a"]);
        assert_eq!(out(&mut core, mc), ["MSG fx/a"], "md/a went by multicast");
        core.multicast_mut().flush(MonoNanos(0));
        assert!(core.multicast_mut().sender_mut(0).poll_transmit().is_some());
        // A multicast topic with no TCP subscriber at all still counts as routed.
        f.clear();
        frame::encode_unsubscribe(&mut f, 2, "md/>");
        encode_publish(&mut f, "md/only", b"x", Default::default(), u32::MAX).unwrap();
        core.handle_input(tcp, MonoNanos(0), &f, f.len());
        assert_eq!(core.totals().unrouted, 0);
    }
}
