//! Router configuration: typed, validated once, with documented defaults.
//!
//! The same structure is read from the `[router]` table of a TOML file by the
//! `tickwire` binary; every field below is a key of that table.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tickwire_wire::frame::{DEFAULT_MAX_FRAME, MIN_MAX_FRAME};

/// What the event loop does when there is nothing to do: block, spin or hybrid
/// (spin for up to `hybrid_spin_us` after the last activity while spinning pays, then
/// block: `tickwire_rt::idle::SpinBudget`). Default `hybrid`.
/// The shared type of every driver; the router refuses `yield` ([`ROUTER_IDLE`]).
pub use tickwire_rt::IdleStrategy;

/// The idle strategies the router supports.
pub const ROUTER_IDLE: [IdleStrategy; 3] = [
    IdleStrategy::Block,
    IdleStrategy::Spin,
    IdleStrategy::Hybrid,
];

/// Parses a router `--idle` value: block, spin or hybrid.
pub fn parse_router_idle(s: &str) -> Result<IdleStrategy, String> {
    IdleStrategy::parse_one_of(s, &ROUTER_IDLE)
}

/// The `idle` key: only what the router supports is offered and taken (the shared
/// type's error offered `yield`, which the check then refused: new-user pass).
fn router_idle_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<IdleStrategy, D::Error> {
    let s = String::deserialize(d)?;
    parse_router_idle(&s).map_err(serde::de::Error::custom)
}

/// What happens to a subscriber whose egress buffer is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SlowConsumerPolicy {
    /// Discard that client's oldest queued messages; the next message it receives
    /// carries the number discarded.
    #[default]
    Discard,
    /// Disconnect it with a SLOW_CONSUMER error.
    Disconnect,
}

impl std::str::FromStr for SlowConsumerPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "discard" => Ok(SlowConsumerPolicy::Discard),
            "disconnect" => Ok(SlowConsumerPolicy::Disconnect),
            _ => Err(format!(
                "unknown slow-consumer policy {s:?}: expected discard or disconnect"
            )),
        }
    }
}

/// The smallest share of `egress_memory_limit` a client may queue while the limit is
/// reached ([`Config::egress_share`]).
pub const MIN_EGRESS_SHARE: usize = 64 << 10;

/// Router configuration. `Config::default()` is a working router on 127.0.0.1:7420.
///
/// A size-valued key (`max_frame`, the `*_limit`, `*_bytes` and `*_buffer` keys,
/// `shm_ring`) takes a whole number of bytes or a string in the command line's size
/// syntax (`"64KiB"`, `"8M"`, `"1GiB"`: [`tickwire_rt::units::parse_size`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on. Default `127.0.0.1:7420`.
    pub listen: SocketAddr,
    /// Name sent to clients in WELCOME and shown in stats. Default `tickwire-router`.
    pub name: String,
    /// Idle strategy of the event loop. Default `hybrid`.
    #[serde(deserialize_with = "router_idle_key")]
    pub idle: IdleStrategy,
    /// Hybrid only: the longest spin after the last activity, in microseconds (shorter
    /// while spinning finds nothing: `tickwire_rt::idle::SpinBudget`). Default 200.
    #[serde(deserialize_with = "time_key::hybrid_spin_us")]
    pub hybrid_spin_us: u64,
    /// Largest frame accepted, in bytes, header included. Default 1048576 (1 MiB).
    #[serde(deserialize_with = "size_key::max_frame")]
    pub max_frame: u32,
    /// Most simultaneous client connections; more are refused with TOO_MANY_CLIENTS.
    /// Default 1024.
    pub max_clients: usize,
    /// Most subscriptions one client may hold. Default 10000.
    pub max_subscriptions: usize,
    /// Most pattern levels one client's subscriptions may hold in all (`md/*/quote` is
    /// three): each level is a node of the subscription index unless another pattern
    /// shares it, ~560 bytes on this build, so this bounds a client's index memory
    /// (~56 MB at the default). Default 100000.
    pub max_subscription_levels: usize,
    /// Most nodes of the router's subscription index, all clients together (each
    /// pattern level that no other pattern shares is one, ~560 bytes): bounds what all
    /// clients' subscriptions cost the router, which `max_subscription_levels` bounds
    /// per client only (`max_clients` times ~33 MB at the defaults). A SUBSCRIBE that
    /// could take the index beyond it is refused (TOO_MANY_SUBSCRIPTIONS, non-fatal).
    /// Default 2000000 (~1.1 GB measured).
    pub max_index_nodes: usize,
    /// Most shared subscriptions (`$share/GROUP/PATTERN`) one client may hold. Default
    /// 100.
    pub max_shared_subscriptions: usize,
    /// Most steps one topic match may take in the subscription index, whatever the
    /// topic (`SubscriptionIndex::match_work`, the direct and the shared index
    /// together). Patterns that branch at many levels (`a/*/a/*/...`, every mix) make a
    /// match visit each of their prefixes even when none matches in the end: 8,192
    /// such patterns of 14 levels made every message cost the router ~3.7 ms. A
    /// SUBSCRIBE that would take the bound past this is refused (TOO_MANY_SUBSCRIPTIONS,
    /// non-fatal). Ordinary patterns add their depth, or a little more. Default 1000.
    pub max_match_work: u64,
    /// Most shared-subscription groups, all clients together. Routing a message visits
    /// every group whose pattern matches its topic (~10 ns each), so this bounds what
    /// one message can cost however the groups were made. A SUBSCRIBE that would make
    /// one more is refused (TOO_MANY_SUBSCRIPTIONS, non-fatal); joining an existing
    /// group is not. Default 1000.
    pub max_shared_groups: usize,
    /// Bytes of undelivered messages queued per client before the slow-consumer policy
    /// applies. Default 8388608 (8 MiB).
    #[serde(deserialize_with = "size_key::egress_limit")]
    pub egress_limit: usize,
    /// Bytes all clients' egress buffers together may hold (their allocated capacity,
    /// not only the unwritten bytes). `egress_limit` bounds one client; without this,
    /// `max_clients` subscribers that never read could hold `max_clients` times it
    /// (8 GiB at the defaults). While the buffers hold this much or more, every client
    /// may queue only its share, `egress_memory_limit / max_clients` (at least 64 KiB
    /// and one largest frame, at most `egress_limit`): one with more is a slow
    /// consumer under `slow_consumer` (its oldest messages discarded, or disconnected
    /// with SLOW_CONSUMER), control frames included; clients under their share queue
    /// as before. The buffers then hold at most about twice this
    /// ([`Config::egress_memory_bound`]). Default 1073741824 (1 GiB); at least
    /// `max_frame`.
    #[serde(deserialize_with = "size_key::egress_memory_limit")]
    pub egress_memory_limit: usize,
    /// What to do with a client whose egress buffer is full. Default `discard`.
    pub slow_consumer: SlowConsumerPolicy,
    /// Milliseconds a new connection has to send HELLO (a deadline from connecting;
    /// before it, at most one HELLO-sized frame of 80 bytes is buffered). Default 5000.
    #[serde(deserialize_with = "time_key::handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
    /// Milliseconds a client has to complete a frame once its first byte arrived: a
    /// deadline, which bytes trickling in do not extend. Default 10000.
    #[serde(deserialize_with = "time_key::stall_timeout_ms")]
    pub stall_timeout_ms: u64,
    /// Milliseconds a client may keep more than `egress_limit` bytes unread, which only
    /// an initial image or cache query queues (it is queued whole): a deadline from the
    /// moment the image went over, which reading part of it does not extend. A client
    /// still over the limit then is disconnected with SLOW_CONSUMER, so clients that
    /// ask for images and never read cannot hold the egress memory (and with it every
    /// other client's images) for longer. Default 30000.
    #[serde(deserialize_with = "time_key::drain_timeout_ms")]
    pub drain_timeout_ms: u64,
    /// Most bytes read from one socket per loop turn (the per-client read buffer).
    /// Default 262144 (256 KiB). Each buffer starts at 4 KiB and doubles while reads
    /// fill it, beyond this size only to hold one frame up to `max_frame`, and shrinks
    /// back to 4 KiB when its connection has been idle (about a second) with nothing
    /// buffered.
    #[serde(deserialize_with = "size_key::read_buffer")]
    pub read_buffer: usize,
    /// Most bytes all read buffers together may hold beyond their initial 4 KiB each
    /// (partial frames, fast senders' buffers). At the limit a buffer does not grow:
    /// its socket is left unread (TCP pushes back) until memory is given back, and a
    /// frame that cannot complete meets its stall deadline. Default 67108864 (64 MiB);
    /// at least `max_frame`.
    #[serde(deserialize_with = "size_key::read_memory_limit")]
    pub read_memory_limit: usize,
    /// Directory of the guaranteed-messaging spool. Unset: guaranteed messaging is off
    /// (PUB_OPEN, QUEUE_REQUEST and BIND are answered with SPOOL_UNAVAILABLE). The
    /// `tickwire router` command sets a per-user default (see its `--help`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<std::path::PathBuf>,
    /// Guaranteed messaging on (the default) or off (`false`: no spool, `data_dir` must
    /// be unset; the command's `--no-guaranteed`). Only the `tickwire router` command
    /// reads it, to decide whether an unset `data_dir` takes its default.
    pub guaranteed: bool,
    /// When a guaranteed publish counts as durable and is acknowledged: `fsync` (group
    /// commit: fdatasync before the ACK; the default), `interval:DURATION` (written, and
    /// fdatasync at most once per interval), or `page-cache` (written, never synced:
    /// survives a router crash, not a power cut).
    pub sync: String,
    /// Most unacknowledged guaranteed publishes per publisher. Default 4096.
    pub publish_window: u32,
    /// Acknowledged guaranteed messages stay retained for replay while they total at
    /// most this many bytes (topic, payload and 88 bytes of index entry each)... Default
    /// 67108864 (64 MiB).
    #[serde(deserialize_with = "size_key::retain_bytes")]
    pub retain_bytes: u64,
    /// ... and are younger than this many ms. Default 3600000 (1 hour).
    #[serde(deserialize_with = "time_key::retain_ms")]
    pub retain_ms: u64,
    /// Most bytes of guaranteed messages held in memory over every queue and the replay
    /// retention, each message counted as its topic and payload and its index entry (88
    /// bytes); beyond it a guaranteed publish is NACKed `queue-full`. Default
    /// 1073741824 (1 GiB).
    #[serde(deserialize_with = "size_key::max_stored_bytes")]
    pub max_stored_bytes: u64,
    /// Most nodes of the queues' subscription index, every queue's patterns together
    /// (each pattern level no other pattern shares is one, ~560 bytes; a queue may have
    /// 256 patterns of up to 125 levels). A queue CREATE that would take it beyond is
    /// refused; `max_match_work` bounds a match in this index too. Default 500000
    /// (~280 MB).
    pub max_queue_index_nodes: usize,
    /// Most queue entries, every queue together: one per message per queue holding it
    /// (~24 bytes, up to twice that while a queue's buffer grows). Bounds what many
    /// queues matching the same messages cost, which `max_stored_bytes` (each message's
    /// bytes once) does not: a guaranteed publish that would pass it is NACKed
    /// `queue-full`, and a queue CREATE whose start would enter more retained messages
    /// than it leaves room for is refused. Default 20000000 (~0.5-1 GB).
    pub max_queue_entries: u64,
    /// Pin the spool's storage thread to this CPU, away from the router thread's (its
    /// writes and fdatasyncs are kernel work on whichever core it runs). Unset: not pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spool_cpu: Option<usize>,
    /// Last-value cache: patterns of the topics whose last messages the router keeps
    /// for initial images and cache queries (e.g. `["md/>"]`; `>` is allowed, bounded
    /// by the limits below). Empty (the default): no cache.
    pub cache: Vec<String>,
    /// Messages kept per cached topic (the last N). Default 1.
    pub cache_depth: usize,
    /// Most topics cached; beyond it the topic updated least recently is evicted.
    /// Default 100000.
    pub cache_max_topics: usize,
    /// Most bytes of cached messages (frames and topic names, with 48 bytes of
    /// bookkeeping per message and 160 per topic); beyond it the topics updated least
    /// recently are evicted. Default 67108864 (64 MiB).
    #[serde(deserialize_with = "size_key::cache_max_bytes")]
    pub cache_max_bytes: usize,
    /// Cached topics one connection's initial images and cache queries may examine per
    /// second: each examines every cached topic (~20 ns each), whatever its pattern
    /// matches, so a client asking again and again could otherwise hold the router.
    /// What an image sends is owed as well, after it is sent: one per cached message
    /// and one per 32 bytes of them.
    /// Past it the request is answered BUSY (non-fatal). The burst is the larger of
    /// `cache_max_topics` (one full scan is always possible) and a tenth of the rate.
    /// Default 1000000 (at the default 100,000 topics: 10 full scans per second, ~2%
    /// of the router's time).
    pub image_scan_rate: u64,
    /// The same for all connections together. Default 4000000.
    pub image_scan_rate_total: u64,
    /// Shared-memory listener name: clients on this host connect with `shm:NAME`
    /// (docs/shm.md). The handshake socket is `/dev/shm/tickwire-NAME.sock` (NAME with a
    /// `/` is the path itself), mode 0600: only the router's user may attach. Unset
    /// (the default): TCP only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shm: Option<String>,
    /// Bytes of each shared-memory ring (each client gets two: one per direction), a
    /// power of two in 4096..=1073741824. Default 8388608 (8 MiB: see
    /// `tickwire_shm::DEFAULT_RING_BYTES`).
    #[serde(deserialize_with = "size_key::shm_ring")]
    pub shm_ring: usize,
    /// Spin only, with a shared-memory listener: the shortest time in µs between two
    /// `epoll_wait` calls. A spinning router scans its shared-memory rings every turn
    /// but asks epoll about sockets (TCP clients, new connections) at most this often,
    /// so a shared-memory hop does not wait behind a syscall every turn; TCP input may
    /// wait up to this long. 0: epoll every turn. Default 2.
    #[serde(deserialize_with = "time_key::shm_epoll_interval_us")]
    pub shm_epoll_interval_us: u64,
    /// A TLS listener next to the plaintext one (docs/security.md, "TLS"): its clients
    /// connect with `tls://HOST:PORT`. Unset (the default): no TLS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_listen: Option<SocketAddr>,
    /// PEM certificate chain of the TLS listener (the router's own certificate first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of `tls_cert`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<std::path::PathBuf>,
    /// PEM certificates of the CAs that sign client certificates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<std::path::PathBuf>,
    /// Client certificates: `none` (the default), `optional` (a client may present one,
    /// signed by `tls_client_ca`) or `required`. A verified certificate whose name is a
    /// user's `cert_name` logs that user in.
    pub tls_client_auth: String,
    /// New TLS connections a second from one source address (an IPv6 host by its /64;
    /// that many at once after a quiet second): each costs the router thread a
    /// handshake (a signature and a key exchange), so one beyond it is closed at accept,
    /// before any TLS work, and counted (`totals.tls_throttled`). 0: no limit. Sources
    /// are remembered in a table of at most 4,096 (sources beyond it share one more
    /// allowance). Default 200.
    pub tls_handshake_rate: u64,
    /// Authentication and authorization: the `[auth]` table of the configuration file
    /// (a table of its own there, not a key of `[router]`; docs/security.md).
    #[serde(skip)]
    pub auth: crate::auth::AuthConfig,
    /// Reliable multicast streams: `[[router.multicast]]` tables, each a group and the
    /// topics that leave by it (docs/multicast.md §10). Empty (the default): every
    /// message goes over TCP.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub multicast: Vec<crate::mcast::MulticastRoute>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 7420)),
            name: "tickwire-router".to_string(),
            guaranteed: true,
            idle: IdleStrategy::default(),
            hybrid_spin_us: 200,
            max_frame: DEFAULT_MAX_FRAME,
            max_clients: 1024,
            max_subscriptions: 10_000,
            max_subscription_levels: 100_000,
            max_index_nodes: 2_000_000,
            max_shared_subscriptions: 100,
            max_match_work: 1_000,
            max_shared_groups: 1_000,
            egress_limit: 8 << 20,
            egress_memory_limit: 1 << 30,
            slow_consumer: SlowConsumerPolicy::default(),
            handshake_timeout_ms: 5_000,
            stall_timeout_ms: 10_000,
            drain_timeout_ms: 30_000,
            read_buffer: 256 << 10,
            read_memory_limit: 64 << 20,
            data_dir: None,
            sync: "fsync".to_string(),
            publish_window: 4096,
            retain_bytes: 64 << 20,
            retain_ms: 3_600_000,
            max_stored_bytes: 1 << 30,
            max_queue_index_nodes: 500_000,
            max_queue_entries: 20_000_000,
            spool_cpu: None,
            cache: Vec::new(),
            cache_depth: 1,
            cache_max_topics: 100_000,
            cache_max_bytes: 64 << 20,
            image_scan_rate: 1_000_000,
            image_scan_rate_total: 4_000_000,
            shm: None,
            shm_ring: tickwire_shm::DEFAULT_RING_BYTES,
            shm_epoll_interval_us: 2,
            tls_listen: None,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_client_auth: "none".to_string(),
            tls_handshake_rate: 200,
            auth: crate::auth::AuthConfig::default(),
            multicast: Vec::new(),
        }
    }
}

/// A configuration value out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid router configuration: {0}")]
pub struct ConfigError(pub String);

impl Config {
    /// Checks ranges; the router calls this once at start.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |s: String| Err(ConfigError(s));
        if !self.guaranteed && self.data_dir.is_some() {
            return err(
                "data_dir is set but guaranteed = false: remove one (without guaranteed \
                 messaging there is no spool)"
                    .into(),
            );
        }
        let minimum = |key: &str, value: u64, min: u64| {
            if value < min {
                return err(format!("{key} {value} is below the minimum {min}"));
            }
            Ok(())
        };
        // A buffer that must hold a whole frame.
        let holds_a_frame = |key: &str, value: usize| {
            if value < self.max_frame as usize {
                return err(format!(
                    "{key} {value} must be at least max_frame {}",
                    self.max_frame
                ));
            }
            Ok(())
        };
        minimum("max_frame", self.max_frame.into(), MIN_MAX_FRAME.into())?;
        holds_a_frame("egress_limit", self.egress_limit)?;
        holds_a_frame("egress_memory_limit", self.egress_memory_limit)?;
        minimum("read_buffer", self.read_buffer as u64, 4096)?;
        holds_a_frame("read_memory_limit", self.read_memory_limit)?;
        if !ROUTER_IDLE.contains(&self.idle) {
            return err(format!(
                "idle {} is not supported by the router (block, spin or hybrid)",
                self.idle
            ));
        }
        if self.max_clients == 0 {
            return err("max_clients must be at least 1".into());
        }
        // A pinning asked for and not possible is refused, as `bench --pin` refuses it
        // (new-user pass: the router started unpinned after a log line).
        if let Some(cpu) = self.spool_cpu.filter(|&c| !tickwire_rt::pin::can_pin(c)) {
            let runs_on = tickwire_rt::pin::usable_cpus()
                .map(|cpus| {
                    let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
                    format!(" (its threads run on CPUs {})", list.join(","))
                })
                .unwrap_or_default();
            return err(format!(
                "spool_cpu {cpu} is not available to this process: no such CPU, or outside \
                 its cpuset{runs_on}"
            ));
        }
        for (key, value) in [
            ("handshake_timeout_ms", self.handshake_timeout_ms),
            ("stall_timeout_ms", self.stall_timeout_ms),
            ("drain_timeout_ms", self.drain_timeout_ms),
        ] {
            if value == 0 {
                return err(format!("{key} 0 is below the minimum 1 ms"));
            }
        }
        if self.name.len() > tickwire_wire::frame::MAX_NAME_LEN {
            return err("name must be at most 64 bytes".into());
        }
        if let Err(e) = parse_sync(&self.sync) {
            return err(e);
        }
        if self.publish_window == 0 || self.publish_window > 1 << 20 {
            return err("publish_window must be in 1..=1048576".into());
        }
        for p in &self.cache {
            if let Err(e) = tickwire_wire::topic::validate_pattern(p.as_bytes()) {
                return err(format!("cache pattern {p:?} is invalid: {e}"));
            }
            if crate::groups::is_shared(p) {
                return err(format!(
                    "cache pattern {p:?}: $share is for shared subscriptions"
                ));
            }
        }
        if self.max_match_work < 128 {
            return err(
                "max_match_work must be at least 128 (one literal pattern of the most levels \
                 a topic may have)"
                    .into(),
            );
        }
        if self.max_queue_index_nodes < 2 {
            return err("max_queue_index_nodes must be at least 2 (the root and one level)".into());
        }
        if self.max_queue_entries == 0 {
            return err("max_queue_entries must be at least 1".into());
        }
        if self.max_index_nodes < 3 {
            return err(
                "max_index_nodes must be at least 3 (the direct and the shared index's roots \
                 and one level)"
                    .into(),
            );
        }
        if self.cache_depth == 0 || self.cache_depth > 1024 {
            return err(format!(
                "cache_depth {} is out of range: 1 to 1024 messages per topic",
                self.cache_depth
            ));
        }
        if self.cache_max_topics == 0 {
            return err("cache_max_topics must be at least 1".into());
        }
        // New-user pass: both were accepted, and every SUBSCRIBE refused, or nothing
        // cached, while their siblings' 0 was refused.
        if self.max_subscriptions == 0 {
            return err("max_subscriptions must be at least 1".into());
        }
        // Below this not even one small message fits (its frame plus 48 bytes of
        // bookkeeping and 160 for its topic): the cache would hold nothing (review).
        let min_cache = 1024;
        if self.cache_max_bytes < min_cache && !self.cache.is_empty() {
            return err(format!(
                "cache_max_bytes must be at least {min_cache} when cache patterns are set \
                 (each message is counted with {} bytes of bookkeeping and each topic with \
                 {}; got {})",
                crate::cache::MESSAGE_OVERHEAD,
                crate::cache::TOPIC_OVERHEAD,
                self.cache_max_bytes
            ));
        }
        if self.image_scan_rate == 0 || self.image_scan_rate_total == 0 {
            return err(
                "image_scan_rate and image_scan_rate_total must be at least 1 (cached topics \
                 examined per second)"
                    .into(),
            );
        }
        if !self.shm_ring.is_power_of_two()
            || !(tickwire_shm::MIN_RING_BYTES..=tickwire_shm::MAX_RING_BYTES)
                .contains(&self.shm_ring)
        {
            return err(format!(
                "shm_ring {} must be a power of two in 4096..=1073741824",
                self.shm_ring
            ));
        }
        if let Some(name) = self.shm.as_deref().filter(|n| !tickwire_shm::valid_name(n)) {
            return err(format!(
                "shm name {name:?}: expected {}",
                tickwire_shm::NAME_RULE
            ));
        }
        let client_auth = match self.tls_client_auth.parse::<tickwire_tls::ClientAuth>() {
            Ok(a) => a,
            Err(e) => return err(format!("tls_client_auth: {e}")),
        };
        if self.tls_listen.is_some() && (self.tls_cert.is_none() || self.tls_key.is_none()) {
            return err(
                "tls_listen needs tls_cert and tls_key (--tls-cert FILE --tls-key FILE)".into(),
            );
        }
        if self.tls_listen.is_none()
            && (self.tls_cert.is_some() || self.tls_key.is_some() || self.tls_client_ca.is_some())
        {
            // New-user pass: --tls-cert and --tls-key without --tls-listen started a
            // plaintext-only router without a word, its user believing TLS was on.
            return err(
                "tls_cert, tls_key and tls_client_ca are the TLS listener's, and there is \
                 none: add tls_listen (--tls-listen ADDR), or leave them out"
                    .into(),
            );
        }
        if client_auth != tickwire_tls::ClientAuth::None && self.tls_client_ca.is_none() {
            return err(format!(
                "tls_client_auth = \"{client_auth}\" needs tls_client_ca (--tls-client-ca FILE)"
            ));
        }
        if let Err(e) = self.authenticator() {
            return err(e.0);
        }
        crate::mcast::validate_routes(&self.multicast).or_else(err)
    }

    /// Compiles the `[auth]` table for these listeners (the `loopback` anonymous policy
    /// admits anonymous clients only when every listener, TLS included, is on a loopback
    /// address).
    pub fn authenticator(
        &self,
    ) -> Result<crate::auth::Authenticator, crate::auth::AuthConfigError> {
        crate::auth::Authenticator::new(&self.auth, self.loopback_only(), self.max_clients)
    }

    /// Anonymous clients are refused on these listeners: `anonymous = "deny"`, or the
    /// `loopback` policy with any listener, TLS included, off loopback. The monitoring
    /// endpoint then asks for an admin's login too, and the latency probe logs in.
    pub fn refuses_anonymous(&self) -> bool {
        !self.auth.anonymous.admits(self.loopback_only())
    }

    /// The memory bounds set above `memory` bytes (this machine's, `MemTotal`): each
    /// as (key, value). Such a bound bounds nothing (new-user pass: `--egress-limit
    /// 99999G` started without a word); the router says so when it starts.
    pub fn bounds_above_memory(&self, memory: u64) -> Vec<(&'static str, u64)> {
        [
            ("egress_limit", self.egress_limit as u64),
            ("egress_memory_limit", self.egress_memory_limit as u64),
            ("read_memory_limit", self.read_memory_limit as u64),
            ("cache_max_bytes", self.cache_max_bytes as u64),
            ("max_stored_bytes", self.max_stored_bytes),
        ]
        .into_iter()
        .filter(|&(_, v)| v > memory)
        .collect()
    }

    /// Every listener (plaintext and TLS) is on a loopback address.
    pub fn loopback_only(&self) -> bool {
        self.listen.ip().is_loopback() && self.tls_listen.is_none_or(|a| a.ip().is_loopback())
    }

    /// The TLS listener's files, as [`tickwire_tls::server_config`] takes them.
    pub fn tls_files(&self) -> tickwire_tls::ServerFiles {
        tickwire_tls::ServerFiles {
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            client_ca: self.tls_client_ca.clone(),
            client_auth: self.tls_client_auth.parse().unwrap_or_default(),
        }
    }

    /// What one client's egress buffer may hold while all of them together hold
    /// `egress_memory_limit` or more: an equal share of the limit among `max_clients`,
    /// at least [`MIN_EGRESS_SHARE`] and one largest router frame (a PUBLISH of
    /// `max_frame` plus what the router adds, `ROUTER_FRAME_OVERHEAD`), so a frame always
    /// fits, and at most `egress_limit`.
    pub fn egress_share(&self) -> usize {
        (self.egress_memory_limit / self.max_clients.max(1))
            .max(MIN_EGRESS_SHARE)
            .max(self.max_frame as usize + tickwire_wire::frame::ROUTER_FRAME_OVERHEAD as usize)
            .min(self.egress_limit)
    }

    /// The most bytes all egress buffers can hold together (their capacities, between
    /// two calls into the core), initial images of the last-value cache aside:
    ///
    /// `egress_memory_limit + egress_limit + LAST_WORD_ROOM + max_clients ×
    /// (egress_share + LAST_WORD_ROOM)`
    ///
    /// Why: below the limit one call grows one buffer to at most `egress_limit` and
    /// one fatal ERROR (messages never grow a buffer past its limit; a control frame
    /// that does is given back). At or over it, a buffer larger than its share only
    /// shrinks and the others grow to at most their share and one fatal ERROR. At the
    /// defaults: 1 GiB + 8 MiB + 1,024 × ~1 MiB, about 2 GiB.
    pub fn egress_memory_bound(&self) -> u64 {
        let room = crate::egress::LAST_WORD_ROOM as u64;
        self.egress_memory_limit as u64
            + self.egress_limit as u64
            + room
            + self.max_clients as u64 * (self.egress_share() as u64 + room)
    }

    /// The handshake timeout as a duration.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.handshake_timeout_ms)
    }

    /// The stall timeout as a duration.
    pub fn stall_timeout(&self) -> Duration {
        Duration::from_millis(self.stall_timeout_ms)
    }

    /// The drain timeout as a duration.
    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.drain_timeout_ms)
    }
}

/// Deserializers of the size-valued keys: a whole number of bytes, or a string the
/// command line's size parser ([`tickwire_rt::units::parse_size`]) reads, so
/// `max_frame = "1MiB"` means what `--max-frame 1MiB` does. Errors name the key.
pub(crate) mod size_key {
    use serde::de::{self, Deserializer, Visitor};
    use std::fmt;

    macro_rules! keys {
        ($($key:ident: $t:ty),* $(,)?) => {$(
            pub(crate) fn $key<'de, D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                let max = u64::try_from(<$t>::MAX).unwrap_or(u64::MAX);
                let v = d.deserialize_any(Size { key: stringify!($key), max })?;
                // `Size` refused anything above `max`.
                <$t>::try_from(v).map_err(|_| de::Error::custom("unreachable: size above max"))
            }
        )*};
    }
    keys!(
        max_frame: u32,
        egress_limit: usize,
        egress_memory_limit: usize,
        read_buffer: usize,
        read_memory_limit: usize,
        retain_bytes: u64,
        max_stored_bytes: u64,
        cache_max_bytes: usize,
        shm_ring: usize,
        max_datagram: usize,
    );

    /// One size-valued key: its name (for errors) and the most its type holds.
    struct Size {
        key: &'static str,
        max: u64,
    }

    impl Size {
        fn in_range<E: de::Error>(&self, v: u64) -> Result<u64, E> {
            if v > self.max {
                return Err(E::custom(format!(
                    "{}: {v} is out of range (at most {} bytes)",
                    self.key, self.max
                )));
            }
            Ok(v)
        }
    }

    impl Visitor<'_> for Size {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(
                f,
                "{}: a whole number of bytes or a size such as \"64KiB\" or \"8MiB\"",
                self.key
            )
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            self.in_range(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.in_range(v),
                Err(_) => Err(E::custom(format!(
                    "{}: {v} is not a size (a size is not negative)",
                    self.key
                ))),
            }
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<u64, E> {
            let v = tickwire_rt::units::parse_size(s)
                .map_err(|e| E::custom(format!("{}: {e}", self.key)))?;
            self.in_range(u64::try_from(v).unwrap_or(u64::MAX))
        }
    }
}

/// Deserializers of the keys in milli- or microseconds (`*_ms`, `*_us`): a whole number
/// in the key's unit, or a duration with its unit (`"5s"`, `"250us"`), as the flags
/// take (a new-user pass found `handshake_timeout_ms = "5s"` refused with serde's
/// "invalid type: string \"5s\", expected u64").
pub(crate) mod time_key {
    use serde::de::{self, Deserializer, Visitor};
    use std::fmt;

    macro_rules! keys {
        ($($key:ident: $unit_ns:expr, $unit:expr),* $(,)?) => {$(
            pub(crate) fn $key<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
                d.deserialize_any(Time { key: stringify!($key), unit_ns: $unit_ns, unit: $unit })
            }
        )*};
    }
    keys!(
        hybrid_spin_us: 1_000, "microseconds",
        handshake_timeout_ms: 1_000_000, "milliseconds",
        stall_timeout_ms: 1_000_000, "milliseconds",
        drain_timeout_ms: 1_000_000, "milliseconds",
        retain_ms: 1_000_000, "milliseconds",
        shm_epoll_interval_us: 1_000, "microseconds",
    );

    /// One time-valued key: its name and its unit (for errors and conversion).
    struct Time {
        key: &'static str,
        unit_ns: u128,
        unit: &'static str,
    }

    impl Visitor<'_> for Time {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(
                f,
                "{}: a whole number of {} or a duration with its unit, such as \"5s\" or \
                 \"250ms\"",
                self.key, self.unit
            )
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| {
                E::custom(format!("{}: {v} is negative (a duration is not)", self.key))
            })
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<u64, E> {
            // Only a finite number is "a number without its unit" ("nan" is not).
            let plain = s.trim().parse::<f64>().is_ok_and(f64::is_finite);
            if plain {
                return Err(E::custom(format!(
                    "{}: {s:?} needs a unit (e.g. \"{s}ms\"), or write it as a number of {} \
                     without quotes",
                    self.key, self.unit
                )));
            }
            let d = tickwire_rt::units::parse_duration(s).map_err(|e| {
                // An out-of-range duration keeps its own reason (review: "4000h" read
                // as "not a duration").
                if e.contains("out of range") {
                    E::custom(format!("{}: {e}", self.key))
                } else {
                    E::custom(format!(
                        "{}: {s:?} is not a duration (e.g. \"5s\", \"250ms\", \"1m\"); a \
                         number without quotes is {}",
                        self.key, self.unit
                    ))
                }
            })?;
            let ns = d.as_nanos();
            if ns % self.unit_ns != 0 {
                return Err(E::custom(format!(
                    "{}: {s:?} is not a whole number of {}",
                    self.key, self.unit
                )));
            }
            u64::try_from(ns / self.unit_ns)
                .map_err(|_| E::custom(format!("{}: {s:?} is out of range", self.key)))
        }
    }
}

/// When a guaranteed publish counts as durable (the router's `sync` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncSetting {
    /// Group commit: fdatasync before the ACK.
    Fsync,
    /// Written, then fdatasync at most once per interval.
    Interval(Duration),
    /// Written to the page cache, never synced.
    PageCache,
}

impl std::fmt::Display for SyncSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncSetting::Fsync => f.write_str("fsync (group commit: fdatasync before every ACK)"),
            SyncSetting::Interval(d) => write!(
                f,
                "interval:{d:?} (ACK once written; fdatasync at most every {d:?})"
            ),
            SyncSetting::PageCache => f.write_str("page-cache (ACK once written; never fdatasync)"),
        }
    }
}

/// Parses `fsync`, `interval:DURATION` (e.g. `interval:10ms`) or `page-cache`.
pub fn parse_sync(s: &str) -> Result<SyncSetting, String> {
    match s {
        "fsync" => Ok(SyncSetting::Fsync),
        "page-cache" => Ok(SyncSetting::PageCache),
        _ => match s.strip_prefix("interval:") {
            // A plain number would be seconds: refused, as for the other short durations.
            Some(d) => match tickwire_rt::units::parse_short_duration(d) {
                // The spool refuses 0 at start (after the data directory is locked):
                // refused here, a usage error naming the value (new-user pass).
                Ok(z) if z.is_zero() => Err(format!(
                    "sync {s:?}: an interval of 0 would sync every batch: use fsync"
                )),
                Ok(d) => Ok(SyncSetting::Interval(d)),
                Err(e) => Err(format!("sync {s:?}: {e}")),
            },
            None => Err(format!(
                "sync {s:?}: expected fsync, interval:DURATION (e.g. interval:10ms) or page-cache"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_bounds_above_the_machines_memory_are_named() {
        let cfg = Config {
            egress_limit: 100 << 30,
            ..Config::default()
        };
        assert_eq!(
            cfg.bounds_above_memory(24 << 30),
            [("egress_limit", 100 << 30)]
        );
        assert!(Config::default().bounds_above_memory(24 << 30).is_empty());
        assert_eq!(Config::default().bounds_above_memory(1 << 20).len(), 5);
    }

    fn config(json: serde_json::Value) -> Result<Config, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    #[test]
    fn size_keys_take_a_number_or_the_command_lines_size_syntax() {
        let c = config(serde_json::json!({
            "max_frame": "1MiB",
            "egress_limit": "8M",
            "read_buffer": 65536,
            "retain_bytes": "2GiB",
            "shm_ring": "64K",
        }))
        .unwrap();
        assert_eq!(c.max_frame, 1 << 20);
        assert_eq!(c.egress_limit, 8 << 20);
        assert_eq!(c.read_buffer, 65536);
        assert_eq!(c.retain_bytes, 2 << 30);
        assert_eq!(c.shm_ring, 64 << 10);
        let m: crate::mcast::MulticastRoute =
            serde_json::from_value(serde_json::json!({ "max_datagram": "1K" })).unwrap();
        assert_eq!(m.max_datagram, 1024);
    }

    /// New-user pass: `handshake_timeout_ms = "5s"` was refused with serde's "invalid
    /// type: string, expected u64"; the time keys take a number in their unit or a
    /// duration with its unit, as the flags do.
    #[test]
    fn time_keys_take_a_number_in_their_unit_or_a_duration() {
        let c = config(serde_json::json!({
            "handshake_timeout_ms": "5s",
            "stall_timeout_ms": 2500,
            "drain_timeout_ms": "1m",
            "retain_ms": "2h",
            "hybrid_spin_us": "1ms",
            "shm_epoll_interval_us": "250us",
        }))
        .unwrap();
        assert_eq!(c.handshake_timeout_ms, 5_000);
        assert_eq!(c.stall_timeout_ms, 2_500);
        assert_eq!(c.drain_timeout_ms, 60_000);
        assert_eq!(c.retain_ms, 7_200_000);
        assert_eq!(c.hybrid_spin_us, 1_000);
        assert_eq!(c.shm_epoll_interval_us, 250);
        for (json, want) in [
            (
                serde_json::json!({ "handshake_timeout_ms": "5" }),
                "handshake_timeout_ms: \"5\" needs a unit",
            ),
            (
                serde_json::json!({ "stall_timeout_ms": "1500us" }),
                "stall_timeout_ms: \"1500us\" is not a whole number of milliseconds",
            ),
            (
                serde_json::json!({ "drain_timeout_ms": "soon" }),
                "drain_timeout_ms: \"soon\" is not a duration (e.g. \"5s\", \"250ms\", \"1m\"); a \
                 number without quotes is milliseconds",
            ),
            (
                serde_json::json!({ "retain_ms": -1 }),
                "retain_ms: -1 is negative",
            ),
            (
                serde_json::json!({ "retain_ms": "4000h" }),
                "retain_ms: \"4000h\" is out of range",
            ),
            (
                serde_json::json!({ "stall_timeout_ms": "nan" }),
                "stall_timeout_ms: \"nan\" is out of range",
            ),
        ] {
            let e = config(json.clone()).unwrap_err();
            assert!(e.contains(want), "{json}: {e}");
        }
    }

    /// Regression (new-user pass): `interval:10` meant ten seconds between fdatasyncs.
    #[test]
    fn a_sync_interval_needs_a_unit() {
        assert_eq!(
            parse_sync("interval:10ms"),
            Ok(SyncSetting::Interval(std::time::Duration::from_millis(10)))
        );
        let e = parse_sync("interval:10").unwrap_err();
        assert!(e.contains("needs a unit") && e.contains("10ms"), "{e}");
        assert!(parse_sync("interval:soon").is_err());
        // The spool refuses 0 at start; refused here, a usage error (new-user pass).
        let e = parse_sync("interval:0ms").unwrap_err();
        assert!(e.contains("use fsync"), "{e}");
    }

    /// New-user pass: `--max-subscriptions 0` and `--cache-max-bytes 0` with a cache
    /// pattern passed `--print-config` and started a router that refused every
    /// SUBSCRIBE or cached nothing.
    #[test]
    fn degenerate_zero_limits_are_refused() {
        let c = Config {
            max_subscriptions: 0,
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            cache_max_bytes: 0,
            cache: vec!["a/>".to_string()],
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            cache_max_bytes: 0,
            ..Config::default()
        };
        assert!(c.validate().is_ok(), "no cache pattern: the size is unused");
    }

    /// New-user pass: TLS files without a TLS listener were ignored without a word.
    #[test]
    fn tls_files_without_a_tls_listener_are_refused() {
        let with = |f: fn(&mut Config)| {
            let mut c = Config::default();
            f(&mut c);
            c.validate()
        };
        for f in [
            (|c: &mut Config| c.tls_cert = Some("c.pem".into())) as fn(&mut Config),
            |c| c.tls_key = Some("k.pem".into()),
            |c| c.tls_client_ca = Some("ca.pem".into()),
        ] {
            let e = with(f).unwrap_err().to_string();
            assert!(e.contains("add tls_listen (--tls-listen ADDR)"), "{e}");
        }
        assert!(with(|c| {
            c.tls_listen = Some("127.0.0.1:0".parse().unwrap());
            c.tls_cert = Some("c.pem".into());
            c.tls_key = Some("k.pem".into());
        })
        .is_ok());
    }

    #[test]
    fn a_bad_size_names_its_key() {
        for (json, want) in [
            (
                serde_json::json!({ "max_frame": "4GiB" }),
                "max_frame: 4294967296 is out of range",
            ),
            (
                serde_json::json!({ "max_frame": 4294967296u64 }),
                "max_frame: 4294967296 is out of range",
            ),
            (
                serde_json::json!({ "egress_limit": "1.5MiB" }),
                "egress_limit: \"1.5MiB\": a size is a whole number",
            ),
            (
                serde_json::json!({ "read_buffer": "8X" }),
                "read_buffer: \"8X\": unknown size suffix",
            ),
            (
                serde_json::json!({ "cache_max_bytes": -1 }),
                "cache_max_bytes: -1 is not a size",
            ),
            (
                serde_json::json!({ "shm_ring": 1.5 }),
                "expected shm_ring: a whole number of bytes",
            ),
        ] {
            let e = config(json.clone()).unwrap_err();
            assert!(e.contains(want), "{json}: {e}");
        }
    }
}
