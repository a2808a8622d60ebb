//! `tickwire router`: configuration from a TOML file and flags, signals, run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde::{Deserialize, Serialize};
use tickwire_router::auth::{Anonymous, AuthConfig};
use tickwire_router::config::ConfigError;
use tickwire_router::{Config, IdleStrategy, Router, SlowConsumerPolicy};

use crate::units::{parse_duration, parse_short_duration, parse_size};

const ROUTER_HELP: &str = "\
Configuration comes from built-in defaults, then the [router] table of the
--config file, then flags (flags win). Print the effective configuration, with
every key, using --print-config. A key is mostly its flag's name with underscores
(--egress-limit: egress_limit; --stall-timeout: stall_timeout_ms); these have no flag,
only a key: retain_bytes, retain_ms, max_stored_bytes,
max_queue_index_nodes, max_queue_entries, image_scan_rate, image_scan_rate_total
(README.md, \"Router configuration\", documents every key and its default).

Example config file (every key optional):
  [router]
  listen = \"0.0.0.0:7420\"
  idle = \"spin\"              # block | spin | hybrid
  egress_limit = 16777216    # bytes queued per slow subscriber
  egress_memory_limit = 536870912  # bytes queued for all clients together
  slow_consumer = \"discard\"  # discard | disconnect

  [[auth.users]]             # who may log in, and what they may do
  name = \"alice\"
  password_hash = \"$argon2id$...\"   # tickwire passwd prints it
  subscribe = { allow = [\"md/>\"], deny = [\"md/secret/>\"] }
  publish = { allow = [\"orders/alice/>\"] }

TLS (docs/security.md): --tls-listen ADDR --tls-cert FILE --tls-key FILE adds a TLS
listener next to the plaintext one (config keys tls_listen, tls_cert, tls_key,
tls_client_ca, tls_client_auth); clients use --router tls://HOST:PORT --ca FILE. With
--tls-client-auth optional|required and --tls-client-ca FILE, a client certificate
signed by that CA is checked in the handshake, and a user whose cert_name is the
certificate's CN (or one of its DNS/e-mail/URI alternative names) is logged in by it.

Authentication (docs/security.md): when every listener is on a loopback address (the
default 127.0.0.1) clients may connect anonymously with every permission, as always.
On any other address every client must log in (--user/--password-file or --token on the client
commands) unless --anonymous allow opens it, with a warning in the log. Users,
groups, per-user connection limits and allow/deny patterns for publish, subscribe and
queues live in the [auth] table; STATS and listing queues are for admin users.

Guaranteed messaging (queues, acknowledged publishing: docs/guaranteed.md) keeps
its spool in --data-dir. Default: $XDG_DATA_HOME/tickwire/router-PORT (usually
~/.local/share/tickwire/router-7420), so a restarted router on the same port
finds its queues again; with --listen on port 0 (an ephemeral port) a temporary
directory, deleted on a clean exit (and, if the router was killed, by the next router
on port 0). A directory serves one router at a time.
--sync says when a guaranteed publish is acknowledged: fsync (default; group
commit, fdatasync before every ACK), interval:10ms, or page-cache.

Stop with Ctrl-C or SIGTERM: clients get an orderly CLOSE and queued bytes are
flushed for up to two seconds.

Examples:
  tickwire router                                      # on 127.0.0.1:7420, idle hybrid
  tickwire router --listen 0.0.0.0:7420 --config router.toml   # all interfaces: users in [auth]
  tickwire router --config router.toml --stall-timeout 2s   # a file, one flag wins
  tickwire router --print-config > router.toml         # start a config file
  tickwire router --data-dir /var/lib/tickwire --sync fsync   # guaranteed messages here
  tickwire router --no-guaranteed                      # direct messages only, no spool
  tickwire router --cache 'md/>' --cache-depth 1       # last value of every md topic
  tickwire router --shm main --idle spin               # + shared memory: clients use shm:main
  tickwire router --tls-listen 0.0.0.0:7443 --tls-cert router.pem --tls-key router.key \\
      --config router.toml

Last-value cache (--cache PATTERN, repeatable; config key cache = [\"md/>\"]): the router
keeps the last message (--cache-depth N: the last N) of every topic matching a cache
pattern, bounded by --cache-max-topics and --cache-max-bytes (the topics updated least
recently are evicted, and counted in stats). `tickwire sub --initial-image` gets them
before the live stream, with no gap and no duplicate; `tickwire cache show PATTERN`
prints them without subscribing.

Reliable multicast (docs/multicast.md, section 10): topics matching a stream's patterns
are sent once per message to its multicast group, whatever the number of receivers,
with NAK recovery. Clients that ask for it (`tickwire sub --multicast auto`) learn the
groups over their session and receive those topics by multicast instead of TCP; other
clients get them over TCP as before, the same messages in the same order.
  tickwire router --multicast '239.255.74.2:7441=md/>'            # one stream, flags
  tickwire router --multicast '239.255.74.2:7441=md/>,fx/>' --multicast-interface 10.0.0.5
In a config file, one table per stream:
  [[router.multicast]]
  group = \"239.255.74.2:7441\"
  topics = [\"md/>\"]
  interface = \"127.0.0.1\"    # where multicast leaves (loopback: this host only)
  buffer = 4096              # datagrams kept for retransmission
  max_datagram = 1400
  retransmit_rate = 67108864 # bytes/s of retransmissions at most

Exit status: 0 after a clean shutdown (Ctrl-C or SIGTERM: clients closed, the spool
flushed); 1 an error, printed (a listener address in use, a spool directory locked by
another router or unreadable, a certificate that does not load); 2 a usage or
configuration error (a bad flag, config key or value), before anything starts.";

#[derive(Args)]
#[command(after_help = ROUTER_HELP)]
pub struct RouterArgs {
    /// TOML file with a [router] table (keys as in --print-config). Size keys take a
    /// number of bytes or a size string as the flags do (`max_frame = "1MiB"`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on: IP:PORT, or HOST:PORT (resolved at start-up; of several
    /// addresses the first, logged) [default: 127.0.0.1:7420].
    #[arg(long, value_name = "ADDR", value_parser = crate::listen::parse)]
    listen: Option<String>,
    /// Not a flag: `--port N`, as other servers spell it, is refused with the
    /// --listen it means (hidden: a bare "unexpected argument" helps nobody).
    #[arg(long, hide = true, value_name = "PORT", num_args = 0..=1, default_missing_value = "", value_parser = crate::listen::no_port_flag)]
    port: Option<String>,
    /// Idle strategy: block (epoll, least CPU), spin (busy-poll, lowest latency) or
    /// hybrid (spin briefly after activity, then block) [default: hybrid].
    #[arg(long, value_name = "STRATEGY", value_parser = tickwire_router::parse_router_idle)]
    idle: Option<IdleStrategy>,
    /// Hybrid: the longest it keeps spinning after the last activity, with its unit:
    /// 200us, 1ms [default: 200us]. It spins that long while the next activity tends to
    /// come within it; when it comes later (a spin that found nothing), each spin is
    /// half the last, down to blocking at once, until activity comes sooner again.
    #[arg(long, value_name = "DURATION", value_parser = parse_short_duration, conflicts_with = "hybrid_spin_us")]
    hybrid_spin: Option<Duration>,
    /// The old spelling of --hybrid-spin, in microseconds.
    #[arg(long, value_name = "US", hide = true)]
    hybrid_spin_us: Option<u64>,
    /// Largest frame accepted, header included (e.g. 1MiB) [default: 1MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    max_frame: Option<usize>,
    /// Most simultaneous connections [default: 1024]. Each takes a file descriptor (a
    /// shared-memory one two): the router raises its soft open-file limit to the hard
    /// one at start, and warns if that is still too low.
    #[arg(long, value_name = "N", value_parser = crate::units::parse_whole_usize)]
    max_clients: Option<usize>,
    /// Most subscriptions per client [default: 10000].
    #[arg(long, value_name = "N")]
    max_subscriptions: Option<usize>,
    /// Most pattern levels one client's subscriptions hold in all (`md/*/quote` is
    /// three; each costs the router a few hundred bytes of index) [default: 100000].
    #[arg(long, value_name = "N")]
    max_subscription_levels: Option<usize>,
    /// Most nodes of the router's subscription index, all clients together (each
    /// pattern level no other pattern shares is one, ~560 bytes): bounds the memory
    /// all subscriptions cost [default: 2000000, ~1.1 GB].
    #[arg(long, value_name = "N")]
    max_index_nodes: Option<usize>,
    /// Most shared subscriptions (`$share/GROUP/PATTERN`) per client [default: 100].
    #[arg(long, value_name = "N")]
    max_shared_subscriptions: Option<usize>,
    /// Most shared-subscription groups, all clients together: routing a message visits
    /// each group matching its topic, so this bounds one message's cost
    /// [default: 1000].
    #[arg(long, value_name = "N")]
    max_shared_groups: Option<usize>,
    /// Most steps one topic match may take in the subscription index, whatever the
    /// topic: patterns that branch at many levels (a/*/a/*/...) cost every message a
    /// visit of each of their prefixes; a SUBSCRIBE past this is refused
    /// [default: 1000].
    #[arg(long, value_name = "N")]
    max_match_work: Option<u64>,
    /// Bytes queued for one client before the slow-consumer policy applies; answers to
    /// its own requests (PONG, ACK, STATS_REPLY) count too, and a client whose unread
    /// answers alone exceed it is disconnected under either policy [default: 8MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    egress_limit: Option<usize>,
    /// Most bytes all clients' egress buffers hold together (allocated, not only
    /// unread): at the limit each client may queue only its share (this / max-clients,
    /// at least 64KiB and one frame), and one holding more is a slow consumer under the
    /// policy; clients under their share are untouched. The buffers stay within about
    /// twice this (docs/reliability.md) [default: 1GiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    egress_memory_limit: Option<usize>,
    /// Slow-consumer policy: discard (drop its oldest messages and tell it how many)
    /// or disconnect [default: discard].
    #[arg(long, value_name = "POLICY")]
    slow_consumer: Option<SlowConsumerPolicy>,
    /// How long a new connection has to send HELLO, from connecting (before HELLO at
    /// most 80 bytes are buffered): 5s, 500ms [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "handshake_timeout_ms")]
    handshake_timeout: Option<Duration>,
    /// The old spelling of --handshake-timeout, in milliseconds.
    #[arg(long, value_name = "MS", hide = true)]
    handshake_timeout_ms: Option<u64>,
    /// How long a client has to complete a frame once it began it (a deadline: a byte
    /// trickle does not extend it): 10s [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "stall_timeout_ms")]
    stall_timeout: Option<Duration>,
    /// The old spelling of --stall-timeout, in milliseconds.
    #[arg(long, value_name = "MS", hide = true)]
    stall_timeout_ms: Option<u64>,
    /// How long a client may keep more than --egress-limit unread, which only an initial
    /// image or cache query queues: past it (a deadline from the moment the image went
    /// over, not extended by reading part of it) the client is disconnected
    /// SLOW_CONSUMER: 30s, 2m [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    drain_timeout: Option<Duration>,
    /// Most bytes read per client per loop turn; buffers start at 4KiB, grow with the
    /// bytes received and shrink back when idle [default: 256KiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    read_buffer: Option<usize>,
    /// Most bytes all read buffers together hold beyond 4KiB each (partial frames);
    /// at the limit sockets are left unread until memory frees up [default: 64MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    read_memory_limit: Option<usize>,
    /// Directory of the guaranteed-messaging spool [default: see below].
    #[arg(long, value_name = "DIR", conflicts_with = "no_guaranteed")]
    data_dir: Option<PathBuf>,
    /// Run without guaranteed messaging (no spool; guaranteed requests are refused
    /// with SPOOL_UNAVAILABLE).
    #[arg(long)]
    no_guaranteed: bool,
    /// When a guaranteed publish is acknowledged: fsync, interval:DURATION, page-cache
    /// [default: fsync].
    #[arg(long, value_name = "POLICY")]
    sync: Option<String>,
    /// Pin the spool's storage thread to this CPU, away from the router's (e.g. the
    /// router under `taskset -c 0`, the spool on 1) [default: not pinned].
    #[arg(long, value_name = "CPU")]
    spool_cpu: Option<usize>,
    /// Most unacknowledged guaranteed publishes per publisher [default: 4096].
    #[arg(long, value_name = "N")]
    publish_window: Option<u32>,
    /// Last-value cache: keep the last message of every topic matching PATTERN
    /// (repeat for several; '>' is allowed, bounded by --cache-max-*). Subscribers may
    /// then ask for an initial image (`tickwire sub --initial-image`).
    #[arg(long = "cache", value_name = "PATTERN", value_parser = crate::units::parse_pattern)]
    cache: Vec<String>,
    /// Messages kept per cached topic (the last N) [default: 1].
    #[arg(long, value_name = "N")]
    cache_depth: Option<usize>,
    /// Most topics cached; the least recently updated is evicted [default: 100000].
    #[arg(long, value_name = "N")]
    cache_max_topics: Option<usize>,
    /// Most bytes cached; the least recently updated topics are evicted [default: 64MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    cache_max_bytes: Option<usize>,
    /// Also listen on shared memory under NAME: clients on this host connect with
    /// `--router shm:NAME` (handshake socket /dev/shm/tickwire-NAME.sock, mode 0600:
    /// only this user may attach; docs/shm.md) [default: TCP only]. NAME: 1 to 64
    /// letters, digits, '-', '_' or '.', not starting with '.'; or a socket path with a
    /// '/' (at most 80 bytes;
    /// clients then use `shm:PATH`), also created 0600: another user attaches only after
    /// a `chmod` of the socket once the router started (docs/shm.md).
    #[arg(long, value_name = "NAME", value_parser = crate::units::parse_shm_name)]
    shm: Option<String>,
    /// Bytes of each shared-memory ring, two per client (a power of two, e.g. 1MiB);
    /// the ring absorbs a slow reader's bursts as TCP's socket buffers do [default: 8MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    shm_ring: Option<usize>,
    /// Spin with --shm: least time between two epoll_wait calls (the rings are scanned
    /// every turn; sockets at most this often), with its unit: 2us, 0 for every turn
    /// [default: 2us].
    #[arg(long, value_name = "DURATION", value_parser = parse_short_duration)]
    shm_epoll_interval: Option<Duration>,
    /// Who may connect without logging in: loopback (only when every listener, TLS
    /// included, is on a loopback address), allow (anywhere: a warning off loopback) or
    /// deny [default: loopback].
    #[arg(long, value_name = "POLICY")]
    anonymous: Option<Anonymous>,
    /// Send topics matching PATTERNS by reliable multicast to GROUP:PORT, as
    /// GROUP:PORT=PATTERN[,PATTERN...] (repeat for several streams; see below).
    #[arg(long = "multicast", value_name = "GROUP:PORT=PATTERNS", value_parser = tickwire_router::mcast::MulticastRoute::parse_flag)]
    multicast: Vec<tickwire_router::mcast::MulticastRoute>,
    /// The interface the --multicast streams leave through [default: 127.0.0.1].
    #[arg(long, value_name = "IP", requires = "multicast")]
    multicast_interface: Option<std::net::Ipv4Addr>,
    /// Tests and demos: every multicast stream drops this fraction of its original
    /// datagrams (0.05 = 5%; receivers recover them by NAK) [default: 0].
    #[arg(long, value_name = "P")]
    multicast_loss: Option<f64>,
    /// Seed of --multicast-loss (the same seed drops the same datagrams) [default: 0].
    #[arg(long, value_name = "S", requires = "multicast_loss")]
    multicast_seed: Option<u64>,
    /// Also listen for TLS clients on ADDR, IP:PORT or HOST:PORT as --listen (they
    /// connect with --router tls://HOST:PORT); needs --tls-cert and --tls-key
    /// [default: no TLS].
    #[arg(long, value_name = "ADDR", help_heading = "TLS", value_parser = crate::listen::parse)]
    tls_listen: Option<String>,
    /// The TLS listener's certificate chain, PEM (the router's certificate first).
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, PEM.
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    tls_key: Option<PathBuf>,
    /// CA certificate(s) that sign client certificates, PEM.
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    tls_client_ca: Option<PathBuf>,
    /// Client certificates: none, optional (verified against --tls-client-ca when
    /// presented) or required (a client without a trusted one is refused in the
    /// handshake) [default: none].
    #[arg(long, value_name = "POLICY", help_heading = "TLS")]
    tls_client_auth: Option<tickwire_client::tls::ClientAuth>,
    /// New TLS connections a second from one source address (an IPv6 host by its /64):
    /// each costs the router thread a handshake, so one beyond it is closed at accept,
    /// before any TLS work (counted in stats, totals.tls_throttled). 0: no limit
    /// [default: 200].
    #[arg(long, value_name = "N", help_heading = "TLS")]
    tls_handshake_rate: Option<u64>,
    /// Router name shown to clients and in stats [default: tickwire-router].
    #[arg(long)]
    name: Option<String>,
    /// Print the effective configuration as TOML and exit (a default data_dir, which
    /// depends on the port, is said in a comment, not written as a key).
    #[arg(long)]
    print_config: bool,
    #[command(flatten)]
    http: crate::monitor::HttpArgs,
    /// With --http: the latency probe publishes a message through the router every
    /// this many milliseconds and times its round trip (0: no probe). It connects
    /// anonymously, or, where the router refuses anonymous clients, as a user of its
    /// own (`_tickwire-probe`, with a token made at start-up). Each round trip wakes
    /// the router and the probe: at 5 ms an otherwise idle router (block idle) used
    /// ~5% of a core in our 2-vCPU VM, at 100 ms ~0.3%. A plain number is
    /// milliseconds; `5ms`, `1s` also work. [default: 5]
    // An Option, not a clap default with `requires = "http"`: the flag alone gets a
    // usage error that says why --http is needed, not clap's generic one.
    #[arg(long, value_name = "MS", value_parser = tickwire_rt::units::parse_ms)]
    probe_ms: Option<u64>,
}

/// The latency probe's period without `--probe-ms`.
const DEFAULT_PROBE_MS: u64 = 5;

#[derive(Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    router: Config,
    /// Users, groups and permissions (docs/security.md).
    #[serde(default)]
    auth: AuthConfig,
    /// Logging settings SIGHUP re-reads (docs/monitoring.md, "Logging").
    #[serde(default, skip_serializing_if = "LogSection::is_empty")]
    log: LogSection,
}

/// `[log]`: what may change while the router runs.
#[derive(Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
struct LogSection {
    /// The log level or filter (as --log-level); --log-level wins at start, SIGHUP applies
    /// this one.
    level: Option<String>,
}

impl LogSection {
    fn is_empty(&self) -> bool {
        self.level.is_none()
    }
}

/// The `[log] level` of the config file at `path` (None without one or without the key).
fn config_log_level(path: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = read_config_file(path)?;
    log_level_of(&text).map_err(|e| config_mistake(path, e))
}

/// The config file's text. One that cannot be read (missing, a directory, no
/// permission) is a usage error (exit status 2): found before anything starts.
fn read_config_file(path: &std::path::Path) -> anyhow::Result<String> {
    // A regular file of at most 16 MiB: a FIFO hung the start and /dev/zero was read
    // until memory ran out (probe).
    tickwire_rt::files::read_to_string_limited(path, 16 << 20).map_err(|e| {
        crate::units::UsageError(format!("reading config file {}: {e}", path.display())).into()
    })
}

/// A config file that does not parse (syntax, an unknown key, a value of the wrong
/// type): a usage error (exit status 2), as a value out of range is.
fn config_mistake(path: &std::path::Path, e: anyhow::Error) -> anyhow::Error {
    crate::units::UsageError(format!("parsing config file {}: {e:#}", path.display())).into()
}

/// The `[log] level` of a config file's text. Only that table is read (the whole file
/// is checked by [`parse_config_file`]): a host name in `[router] listen` is resolved
/// once, there.
fn log_level_of(text: &str) -> anyhow::Result<Option<String>> {
    let doc: toml::Table = toml::from_str(text)?;
    Ok(match doc.get("log") {
        Some(log) => LogSection::deserialize(log.clone())?.level,
        None => None,
    })
}

/// The config file, its `[router] listen` and `tls_listen` taking a host name as the
/// flags do (`localhost:7420`: resolved, the first address bound). A file whose
/// addresses are IP addresses is read straight from its text (errors point at the line).
fn parse_config_file(text: &str) -> anyhow::Result<ConfigFile> {
    let mut doc: toml::Table = toml::from_str(text)?;
    let mut resolved = false;
    if let Some(toml::Value::Table(router)) = doc.get_mut("router") {
        for key in ["listen", "tls_listen"] {
            if let Some(toml::Value::String(a)) = router.get_mut(key) {
                if a.parse::<std::net::SocketAddr>().is_err() {
                    *a = crate::listen::resolve(&format!("[router] {key} ="), a)?.to_string();
                    resolved = true;
                }
            }
        }
    }
    let parsed = match resolved {
        true => ConfigFile::deserialize(doc),
        false => toml::from_str::<ConfigFile>(text),
    };
    let cfg = parsed.map_err(|e| explain_config_error(text, e))?;
    // A user entry keeps unknown keys aside (serde cannot refuse them next to its
    // flattened rules): refused here as serde refuses the other tables' (new-user pass:
    // a misspelt key in [[auth.users]] got a bare error, no place, no suggestion).
    for (i, u) in cfg.auth.users.iter().enumerate() {
        if let Some(key) = u.unknown.keys().next() {
            let known: Vec<String> = tickwire_router::auth::USER_KEYS
                .iter()
                .map(|k| format!("`{k}`"))
                .collect();
            let message = format!(
                "unknown field `{key}`, expected one of {}",
                known.join(", ")
            );
            // toml's span for a key of an element would be the element's header.
            let span = nth_header(text, "[[auth.users]]", i);
            if let Some((better, at)) = unknown_key(text, span, &message) {
                anyhow::bail!(
                    "{}",
                    match at {
                        Some(at) => quote_key_line(text, at, &better),
                        None => better,
                    }
                );
            }
        }
    }
    Ok(cfg)
}

/// Where the `n`th (0-based) line that is `header` (a comment after it allowed) is in
/// `text`, as a byte range; None if there are fewer.
fn nth_header(text: &str, header: &str, n: usize) -> Option<std::ops::Range<usize>> {
    let mut at = 0;
    let mut seen = 0;
    for line in text.split_inclusive('\n') {
        let code = line.split('#').next().unwrap_or_default().trim();
        if code == header {
            if seen == n {
                return Some(at..at + line.trim_end().len());
            }
            seen += 1;
        }
        at += line.len();
    }
    None
}

/// `err`, met reading the config file `text`, with an unknown key reported by its table
/// and the nearest known key (serde's own message lists every key of the table, ~40
/// for `[router]`, and suggests none). Other errors are left as they are.
fn explain_config_error(text: &str, err: toml::de::Error) -> anyhow::Error {
    let message = err.message();
    match unknown_key(text, err.span(), message) {
        // toml pointed at an `[[array]]` header (its span for a key of an element's
        // inline table): quote the key's own line instead, in toml's layout.
        Some((better, Some(at))) => anyhow::anyhow!("{}", quote_key_line(text, at, &better)),
        // The rest of toml's text (the line and column, the line quoted) stays.
        Some((better, None)) => anyhow::anyhow!("{}", err.to_string().replace(message, &better)),
        None => err.into(),
    }
}

/// Where an unknown key is in the text: line (0-based), column (byte, 0-based), length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KeyAt {
    line: usize,
    col: usize,
    len: usize,
}

/// toml's error layout (`TOML parse error at line N, column C`, the line quoted, the key
/// underlined), at `at`.
fn quote_key_line(text: &str, at: KeyAt, message: &str) -> String {
    let line = text.lines().nth(at.line).unwrap_or_default();
    let number = (at.line + 1).to_string();
    let gutter = " ".repeat(number.len());
    format!(
        "TOML parse error at line {number}, column {}\n{gutter} |\n{number} | {line}\n\
         {gutter} | {}{}\n{message}\n",
        at.col + 1,
        " ".repeat(at.col),
        "^".repeat(at.len.max(1)),
    )
}

/// serde's `unknown field `KEY`, expected one of `a`, `b`, ...` as `unknown key "KEY" in
/// [TABLE]; did you mean "a"?` followed by the table's keys; None for any other message.
#[cfg(test)]
fn unknown_key_message(
    text: &str,
    span: Option<std::ops::Range<usize>>,
    message: &str,
) -> Option<String> {
    unknown_key(text, span, message).map(|(m, _)| m)
}

/// [`unknown_key_message`], with the key's place when toml's span is not on its line.
fn unknown_key(
    text: &str,
    span: Option<std::ops::Range<usize>>,
    message: &str,
) -> Option<(String, Option<KeyAt>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, expected) = rest.split_once('`')?;
    // serde names the known keys in backquotes: "expected one of `a`, `b`", "expected
    // `a` or `b`", "expected `a`", or "there are no fields".
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let (table, at) = match table_of(text, span, key) {
        Some((place, at)) => (format!(" {place}"), at),
        None => (String::new(), None),
    };
    let mut out = format!("unknown key {key:?}{table}");
    let nearest = known
        .iter()
        .map(|k| (strsim::jaro_winkler(key, k), *k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((_, k)) = nearest {
        out.push_str(&format!("; did you mean {k:?}?"));
    }
    match known.is_empty() {
        true => out.push_str(&format!("\n(no keys are known{table})")),
        false => {
            // Wrapped: [router] has ~40 keys.
            let mut line = format!("valid keys{table}:");
            for k in &known {
                if line.len() + k.len() > 88 {
                    out.push('\n');
                    out.push_str(line.trim_end());
                    line = " ".to_owned();
                }
                line.push_str(&format!(" {k}"));
            }
            out.push('\n');
            out.push_str(&line);
        }
    }
    Some((out, at))
}

/// Where `key` is: `in [router]` (the table of the last `[...]` header above the key's
/// line: the line `span` starts on, or else the first that sets `key`), `at the top
/// level`, or None when the line is not found. A key that is itself a header's last
/// name (`[routr]`, `[router.multicastt]`) is in the table its header names first.
///
/// For a key of an `[[array]]` element toml's span is the element's header: the key is
/// then looked for below it, and named with the inline table (or dotted key) it sits
/// in: `in [[auth.users]] subscribe` for `subscribe = {alow = [...]}`, with its
/// [`KeyAt`] so the error can quote that line.
fn table_of(
    text: &str,
    span: Option<std::ops::Range<usize>>,
    key: &str,
) -> Option<(String, Option<KeyAt>)> {
    let lines: Vec<&str> = text.lines().collect();
    let at = match span {
        Some(span) => text.get(..span.start)?.matches('\n').count(),
        None => {
            let at = lines.iter().position(|line| {
                line.trim_start()
                    .strip_prefix(key)
                    .is_some_and(|after| after.trim_start().starts_with(['=', '.']))
            });
            match at {
                Some(at) => at,
                // Not at a line's start: in an inline table, or after a dot.
                None => return key_below(&lines, 0, key),
            }
        }
    };
    let name = |header: &str| -> String {
        let inner = header.trim_start_matches('[');
        inner
            .split(']')
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let line = lines.get(at)?.trim();
    if line.starts_with('[') && name(line).rsplit('.').next().map(str::trim) != Some(key) {
        if let Some(found) = key_below(&lines, at, key) {
            return Some(found);
        }
    }
    let table = if line.starts_with('[') {
        let header = name(line);
        header
            .rsplit_once('.')
            .map(|(table, _)| table.trim().to_owned())
    } else {
        lines
            .get(..at)?
            .iter()
            .map(|line| line.trim())
            .rfind(|line| line.starts_with('['))
            .map(name)
    };
    Some((
        match table {
            Some(t) => format!("in [{t}]"),
            None => "at the top level".to_owned(),
        },
        None,
    ))
}

/// The first place at or below line `from` where `key` is set (`key =`, after the line's
/// start, a `{`, a `,` or a `.`), named by the header above it (`[[auth.users]]` as
/// written) and the inline table or dotted key it is in.
fn key_below(lines: &[&str], from: usize, key: &str) -> Option<(String, Option<KeyAt>)> {
    let (line, col) = lines.iter().enumerate().skip(from).find_map(|(i, line)| {
        if line.trim_start().starts_with('[') {
            return None;
        }
        line.match_indices(key).find_map(|(col, _)| {
            let before = line[..col].trim_end();
            let after = line[col + key.len()..].trim_start();
            let starts = before.is_empty() || before.ends_with(['{', ',', '.']);
            (starts && after.starts_with('=')).then_some((i, col))
        })
    })?;
    let header = lines[..line]
        .iter()
        .map(|l| l.trim())
        .rfind(|l| l.starts_with('['))
        .map(|h| h.split('#').next().unwrap_or_default().trim().to_owned());
    // The key it is nested under on its line: `subscribe = {` or `subscribe.`.
    let before = lines[line][..col].trim_end();
    let parent = match before.strip_suffix('.') {
        Some(dotted) => Some(
            dotted
                .rsplit(['{', ','])
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned(),
        ),
        None => before.rfind('{').and_then(|brace| {
            let owner = before[..brace].trim_end().strip_suffix('=')?;
            let owner = owner.rsplit(['{', ',']).next().unwrap_or_default().trim();
            (!owner.is_empty()).then(|| owner.to_owned())
        }),
    };
    let place = match (header, parent) {
        (Some(h), Some(p)) => format!("in {h} {p}"),
        (Some(h), None) => format!("in {h}"),
        (None, Some(p)) => format!("in {p} (top level)"),
        (None, None) => "at the top level".to_owned(),
    };
    Some((
        place,
        Some(KeyAt {
            line,
            col,
            len: key.len(),
        }),
    ))
}

impl RouterArgs {
    /// Defaults, then the file, then flags.
    pub fn to_config(&self) -> anyhow::Result<Config> {
        let mut file_text = None;
        let mut cfg = match &self.config {
            Some(path) => {
                let text = read_config_file(path)?;
                let file = parse_config_file(&text).map_err(|e| config_mistake(path, e))?;
                file_text = Some(text);
                Config {
                    auth: file.auth,
                    ..file.router
                }
            }
            None => Config::default(),
        };
        if let Some(a) = self.anonymous {
            cfg.auth.anonymous = a;
        }
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = &self.$f { cfg.$f = v.clone().into(); } )* };
        }
        if let Some(a) = &self.listen {
            cfg.listen = crate::listen::resolve("--listen", a)?;
        }
        set!(
            idle,
            hybrid_spin_us,
            max_clients,
            max_subscriptions,
            max_subscription_levels,
            max_index_nodes,
            max_shared_subscriptions,
            max_shared_groups,
            max_match_work,
            egress_limit,
            egress_memory_limit,
            slow_consumer,
            handshake_timeout_ms,
            stall_timeout_ms,
            read_buffer,
            read_memory_limit,
            name,
            sync,
            publish_window,
            cache_depth,
            cache_max_topics,
            cache_max_bytes,
            shm_ring,
            tls_handshake_rate
        );
        if !self.cache.is_empty() {
            cfg.cache = self.cache.clone();
        }
        if let Some(a) = &self.tls_listen {
            cfg.tls_listen = Some(crate::listen::resolve("--tls-listen", a)?);
        }
        if let Some(p) = &self.tls_cert {
            cfg.tls_cert = Some(p.clone());
        }
        if let Some(p) = &self.tls_key {
            cfg.tls_key = Some(p.clone());
        }
        if let Some(p) = &self.tls_client_ca {
            cfg.tls_client_ca = Some(p.clone());
        }
        if let Some(a) = self.tls_client_auth {
            cfg.tls_client_auth = a.to_string();
        }
        if let Some(n) = &self.shm {
            cfg.shm = Some(n.clone());
        }
        for r in &self.multicast {
            let mut r = r.clone();
            if let Some(ip) = self.multicast_interface {
                r.interface = ip;
            }
            cfg.multicast.push(r);
        }
        for r in &mut cfg.multicast {
            if let Some(p) = self.multicast_loss {
                r.loss = p;
            }
            if let Some(seed) = self.multicast_seed {
                r.seed = seed;
            }
        }
        if let Some(d) = &self.data_dir {
            // The flag turns guaranteed messaging on over a file's `guaranteed = false`.
            cfg.guaranteed = true;
            cfg.data_dir = Some(d.clone());
        }
        if let Some(c) = self.spool_cpu {
            cfg.spool_cpu = Some(c);
        }
        if self.no_guaranteed {
            cfg.guaranteed = false;
            cfg.data_dir = None;
        }
        // The duration flags, in the config's units (they conflict with the old spellings).
        if let Some(d) = self.shm_epoll_interval {
            cfg.shm_epoll_interval_us = in_unit(d, Unit::Micros, "--shm-epoll-interval")?;
        }
        if let Some(d) = self.hybrid_spin {
            cfg.hybrid_spin_us = in_unit(d, Unit::Micros, "--hybrid-spin")?;
        }
        if let Some(d) = self.handshake_timeout {
            cfg.handshake_timeout_ms = in_unit(d, Unit::Millis, "--handshake-timeout")?;
        }
        if let Some(d) = self.stall_timeout {
            cfg.stall_timeout_ms = in_unit(d, Unit::Millis, "--stall-timeout")?;
        }
        if let Some(d) = self.drain_timeout {
            cfg.drain_timeout_ms = in_unit(d, Unit::Millis, "--drain-timeout")?;
        }
        if let Some(m) = self.max_frame {
            // A usage error (status 2) like every other out-of-range setting, without
            // the conversion error's own text.
            cfg.max_frame = u32::try_from(m).map_err(|_| {
                crate::units::UsageError(format!(
                    "--max-frame {m} is out of range: a frame is at most {} bytes (4GiB - 1)",
                    u32::MAX
                ))
            })?;
        }
        // New-user pass: `--shm-ring 1MiB` without a shared-memory listener was
        // silently ignored.
        if cfg.shm.is_none() {
            for (given, flag) in [
                (self.shm_ring.is_some(), "--shm-ring"),
                (self.shm_epoll_interval.is_some(), "--shm-epoll-interval"),
            ] {
                if given {
                    return Err(crate::units::UsageError(format!(
                        "{flag} sets up the shared-memory listener, which is off: add --shm NAME \
                         (or shm = \"NAME\" in the config file)"
                    ))
                    .into());
                }
            }
        }
        cfg.validate()
            .map_err(|e| self.locate(e, file_text.as_deref()))?;
        Ok(cfg)
    }

    /// A range error with where its value came from: the flag that set it, or the
    /// config file's line (the key a message starts with, e.g. `max_frame 10 is below
    /// ...`); unchanged when neither says (a default, or a message about several keys).
    fn locate(&self, e: ConfigError, file_text: Option<&str>) -> ConfigError {
        let key = e.0.split(' ').next().unwrap_or_default();
        let dashed = key.replace('_', "-");
        // The flag that set `key`, if one did (a timeout's flag drops the `_ms` of its
        // key, unless the old spelling set it).
        let flag = match key {
            "max_frame" => self.max_frame.is_some().then_some(dashed),
            "egress_limit" => self.egress_limit.is_some().then_some(dashed),
            "egress_memory_limit" => self.egress_memory_limit.is_some().then_some(dashed),
            "read_buffer" => self.read_buffer.is_some().then_some(dashed),
            "read_memory_limit" => self.read_memory_limit.is_some().then_some(dashed),
            "publish_window" => self.publish_window.is_some().then_some(dashed),
            "shm_ring" => self.shm_ring.is_some().then_some(dashed),
            "idle" => self.idle.is_some().then_some(dashed),
            "sync" => self.sync.is_some().then_some(dashed),
            "max_clients" => self.max_clients.is_some().then_some(dashed),
            "max_subscriptions" => self.max_subscriptions.is_some().then_some(dashed),
            "max_subscription_levels" => self.max_subscription_levels.is_some().then_some(dashed),
            "max_shared_subscriptions" => self.max_shared_subscriptions.is_some().then_some(dashed),
            "cache_depth" => self.cache_depth.is_some().then_some(dashed),
            "cache_max_topics" => self.cache_max_topics.is_some().then_some(dashed),
            "cache_max_bytes" => self.cache_max_bytes.is_some().then_some(dashed),
            "handshake_timeout_ms" => match (self.handshake_timeout, self.handshake_timeout_ms) {
                (Some(_), _) => Some("handshake-timeout".into()),
                (_, Some(_)) => Some(dashed),
                _ => None,
            },
            "stall_timeout_ms" => match (self.stall_timeout, self.stall_timeout_ms) {
                (Some(_), _) => Some("stall-timeout".into()),
                (_, Some(_)) => Some(dashed),
                _ => None,
            },
            "drain_timeout_ms" => self.drain_timeout.is_some().then(|| "drain-timeout".into()),
            _ => None,
        };
        if let Some(flag) = flag {
            return ConfigError(format!("{} (--{flag})", e.0));
        }
        let line = file_text.and_then(|text| config_key_line(text, key));
        match (line, &self.config) {
            (Some(n), Some(path)) => ConfigError(format!(
                "{} (config file {}, line {n})",
                e.0,
                path.display()
            )),
            _ => e,
        }
    }
}

/// The unit of a duration setting's config key (`_us` or `_ms`).
#[derive(Clone, Copy)]
enum Unit {
    Micros,
    Millis,
}

/// A duration flag's value in its config key's unit. A value that is not a whole
/// number of units is a usage error, as it is in the config file: the conversion must
/// not turn `--handshake-timeout 0.4ms` into a 0 ms timeout (the error then said
/// "handshake_timeout_ms 0", a value nobody had given) nor 1.5ms into 1.
fn in_unit(d: Duration, unit: Unit, flag: &str) -> Result<u64, crate::units::UsageError> {
    let (unit_ns, name) = match unit {
        Unit::Micros => (1_000, "microseconds"),
        Unit::Millis => (1_000_000, "milliseconds"),
    };
    let ns = d.as_nanos();
    if ns % unit_ns != 0 {
        return Err(crate::units::UsageError(format!(
            "{flag} {d:?} is not a whole number of {name}, the unit of the setting"
        )));
    }
    Ok(u64::try_from(ns / unit_ns).unwrap_or(u64::MAX))
}

/// The 1-based line of a config file that sets `key` (`key = ...`), if one does.
fn config_key_line(text: &str, key: &str) -> Option<usize> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
        return None;
    }
    text.lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

/// The spool directory of a router on `port` without `data_dir`: `router-PORT` in the
/// per-user data directory.
fn default_data_dir(port: u16) -> anyhow::Result<PathBuf> {
    let home = tickwire_rt::paths::Environment::current()
        .data_home()
        .context(
            "no per-user data directory (HOME unset): pass --data-dir DIR or --no-guaranteed",
        )?;
    Ok(home.join(format!("router-{port}")))
}

/// Descriptors the router holds besides its clients' (listeners, epoll, the spool's
/// files, the monitor, the reserve it frees to refuse a client at the limit).
const OWN_DESCRIPTORS: u64 = 64;

/// The most the open-file limit is raised to when its hard limit is unlimited.
const NOFILE_CEILING: u64 = 1 << 20;

/// Raises the soft open-file limit to the hard one, as Go servers (NATS) do at start:
/// a distribution's default soft limit (often 1,024) would refuse clients well before
/// `max_clients` (one descriptor per TCP or TLS client, two per shared-memory one).
/// Says so at INFO when it changed, and warns when even the hard limit is too low for
/// `max_clients` (counted as shared-memory clients when `shm` listens).
fn raise_open_file_limit(max_clients: usize, shm: bool) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(NOFILE_CEILING);
    let soft = limit.current.unwrap_or(NOFILE_CEILING);
    let mut now = soft;
    if soft < hard {
        let raised = Rlimit {
            current: Some(hard),
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                now = hard;
                tracing::info!(
                    from = soft,
                    to = hard,
                    "open-file limit raised to its hard limit"
                );
            }
            Err(e) => {
                tracing::warn!(soft, hard, error = %e, "could not raise the open-file limit")
            }
        }
    }
    let per_client = if shm { 2 } else { 1 };
    let needed = max_clients as u64 * per_client + OWN_DESCRIPTORS;
    if now < needed {
        tracing::warn!(
            limit = now,
            max_clients,
            needed,
            "the open-file limit is below what max_clients needs (one descriptor per client, \
             two per shared-memory client, plus ~{OWN_DESCRIPTORS} of the router's own): \
             clients past it are refused (TOO_MANY_CLIENTS); raise the hard limit \
             (ulimit -Hn, systemd LimitNOFILE=) or lower max_clients"
        );
    }
}

/// This machine's memory in bytes (`MemTotal` of /proc/meminfo), if it can be read.
fn machine_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    kib.checked_mul(1024)
}

pub fn run(args: RouterArgs) -> anyhow::Result<ExitCode> {
    if args.probe_ms.is_some() && args.http.http.is_none() {
        return Err(crate::units::UsageError(
            "--probe-ms needs --http (the probe feeds the monitoring endpoint)".into(),
        )
        .into());
    }
    let probe_ms = args.probe_ms.unwrap_or(DEFAULT_PROBE_MS);
    let mut cfg = args.to_config()?;
    if !crate::logging::level_from_flag() {
        if let Some(level) = config_log_level(args.config.as_deref())? {
            crate::logging::set_level(&level).map_err(|e| {
                let path = args.config.as_deref().unwrap_or(std::path::Path::new("?"));
                crate::units::UsageError(format!(
                    "config file {}, [log] level: {}",
                    path.display(),
                    crate::units::error_text(&e)
                ))
            })?;
        }
    }
    if args.print_config {
        // A default spool directory is the port's (or a temporary one): said in a
        // comment, not written as a key, so a file started from this output and given
        // another `listen` does not share this port's spool.
        let default_spool = match (&cfg.data_dir, !cfg.guaranteed, cfg.listen.port()) {
            (None, false, 0) => Some("a temporary directory (port 0), removed at exit".to_owned()),
            (None, false, port) => Some(match default_data_dir(port) {
                Ok(d) => format!("{} (for port {port})", d.display()),
                Err(_) => "none: HOME is unset, so data_dir or --no-guaranteed is needed".into(),
            }),
            _ => None,
        };
        // `[log] level` as the file sets it; unset, a comment says what applies.
        let level = config_log_level(args.config.as_deref())?;
        let unset_level = level.is_none();
        let doc = ConfigFile {
            auth: std::mem::take(&mut cfg.auth),
            router: cfg,
            log: LogSection { level },
        };
        let mut text = toml::to_string(&doc).context("rendering the configuration")?;
        if let Some(d) = default_spool {
            // Inside [router], after its last key: a `data_dir = ...` written there is
            // the router's (new-user pass: the note came after [log], where such a line
            // was refused as an unknown key of [log]).
            let note = format!(
                "# data_dir = \"...\"   # not set: the guaranteed-messaging spool defaults to\n\
                 # router-PORT in the per-user data directory, here {d}.\n"
            );
            let body = text
                .find("[router]\n")
                .map_or(0, |i| i + "[router]\n".len());
            // Before the blank line that ends [router] (new-user pass: the note ran
            // into the next table's header).
            let end = text[body..].find("\n[").map_or(text.len(), |i| body + i);
            text.insert_str(end, &note);
        }
        print!("{text}");
        if unset_level {
            println!(
                "\n[log]\n\
                 # level = \"info\"   # not set: --log-level, else $TICKWIRE_LOG, else info; \
                 SIGHUP re-reads it"
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    // The default spool directory: per user and port, or temporary for port 0.
    let mut temp_spool = None;
    if cfg.data_dir.is_none() && cfg.guaranteed {
        if cfg.listen.port() == 0 {
            let dir = crate::temp_spool::create()?;
            cfg.data_dir = Some(dir.path().to_path_buf());
            temp_spool = Some(dir);
        } else {
            cfg.data_dir = Some(default_data_dir(cfg.listen.port())?);
        }
    }
    let listen = cfg.listen;
    // Logged as fields, each its own key in a JSON log (new-user pass: they were one
    // message string a log pipeline had to parse).
    let settings = (
        format!("{:?}", cfg.idle).to_lowercase(),
        format!("{:?}", cfg.slow_consumer).to_lowercase(),
        cfg.egress_limit,
        cfg.egress_memory_limit,
        cfg.max_frame,
        cfg.max_clients,
    );
    let guaranteed = cfg.data_dir.clone();
    if let Some(memory) = machine_memory() {
        for (key, value) in cfg.bounds_above_memory(memory) {
            tracing::warn!(
                key,
                value,
                machine_memory = memory,
                "{key} is more than this machine's memory: it bounds nothing here"
            );
        }
    }
    if !cfg.loopback_only() && cfg.auth.anonymous == Anonymous::Allow {
        tracing::warn!(listen = %cfg.listen, "anonymous clients are allowed on a non-loopback address (--anonymous allow): anyone who reaches this port may publish, subscribe and read stats as the anonymous rules allow");
    }
    let (users, anonymous) = (cfg.auth.users.len(), cfg.auth.anonymous);
    let anonymous_restricted = cfg.auth.anonymous_rules.is_some();
    // Rules for anonymous clients that leave out `queues` leave every queue to them
    // (hostile-input pass: an anonymous client limited to public/> topics showed,
    // purged and deleted an admin's queues).
    let anonymous_queues_open = cfg.guaranteed
        && cfg
            .auth
            .anonymous_rules
            .as_ref()
            .is_some_and(|r| r.queues == tickwire_router::auth::AllowDeny::default());
    let http = args.http.addr(7480)?;
    // The TLS listener counts: one off loopback refuses anonymous clients everywhere.
    let refuses_anonymous = cfg.refuses_anonymous();
    let access = match http {
        Some(addr) => args
            .http
            .access(addr, Some((&cfg.auth, refuses_anonymous)))?,
        None => None,
    };
    // Where anonymous clients are refused, the latency probe logs in as a user of its
    // own (added after the monitoring endpoint took its users: it is no HTTP login).
    let probe_login = match (http, probe_ms, refuses_anonymous) {
        (Some(_), 1.., true) => {
            let probe = crate::monitor::probe::PROBE_USER;
            if cfg.auth.users.iter().any(|u| u.name == probe) {
                anyhow::bail!(
                    "[[auth.users]] name {probe:?} is reserved for the router's latency probe"
                );
            }
            let (user, login) = crate::monitor::probe::probe_user();
            cfg.auth.users.push(user);
            Some(login)
        }
        _ => None,
    };
    let tls_listen = cfg.tls_listen;
    let shm_name = cfg.shm.clone();
    raise_open_file_limit(cfg.max_clients, cfg.shm.is_some());
    let mut router = Router::bind(cfg).map_err(|e| {
        use tickwire_router::driver::Error;
        let hint = match &e {
            Error::ShmBind { .. } => "pick another name with --shm",
            Error::Bind { addr, .. } if Some(*addr) == tls_listen => {
                "is another tickwire router running? pick another port with --tls-listen"
            }
            _ => "is another tickwire router running? pick another port with --listen",
        };
        let e = anyhow::Error::new(e).context(format!("starting the router on {listen}"));
        crate::listen::hint_in_use(e, hint)
    })?;
    let monitor = http.map(|_| router.monitor());
    let handle = router.handle();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .context("installing signal handlers")?;
    crate::logging::replay_early_sighup();
    let config_path = args.config.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == signal_hook::consts::SIGHUP {
                    // Only what can change safely: the log level and the log file.
                    let reloaded = config_log_level(config_path.as_deref())
                        .and_then(|level| crate::logging::reload(level.as_deref()));
                    match reloaded {
                        Ok(()) => tracing::info!("SIGHUP: log settings reloaded"),
                        Err(e) => tracing::warn!(error = %format!("{e:#}"), "SIGHUP: reload failed; settings unchanged"),
                    }
                    continue;
                }
                tracing::info!(signal = sig, "signal received");
                handle.shutdown();
                break;
            }
        })
        .context("starting the signal thread")?;
    let server = match (http, monitor) {
        (Some(addr), Some(reader)) => {
            let probe = match probe_ms {
                0 => None,
                ms => Some(
                    crate::monitor::probe::start(
                        router.local_addr(),
                        Duration::from_millis(ms),
                        probe_login,
                    )
                    .context("starting the latency probe")?,
                ),
            };
            let component =
                std::sync::Arc::new(crate::monitor::router::RouterMonitor::new(reader, probe));
            // Bound now, announced on stdout after the router's banner (scripts read
            // that first).
            Some(crate::monitor::start(
                addr,
                component,
                args.http.metrics_max_series,
                access,
            )?)
        }
        _ => None,
    };
    // Said once the router and its monitoring port are up (a router that cannot bind
    // a port says only that); with a spool, its recovery line has said where and how
    // it syncs.
    if guaranteed.is_none() {
        // Named by where it was asked (new-user pass: `guaranteed = false` in the file
        // was logged as the flag nobody gave).
        let source = if args.no_guaranteed {
            "--no-guaranteed"
        } else {
            "guaranteed = false in the config file"
        };
        tracing::info!("guaranteed messaging off ({source})");
        // Settings of the spool that is not there (new-user pass: accepted in silence).
        let unused: Vec<&str> = [
            ("--sync", args.sync.is_some()),
            ("--publish-window", args.publish_window.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        if !unused.is_empty() {
            tracing::warn!(
                "{} set nothing: guaranteed messaging is off ({source})",
                unused.join(" and ")
            );
        }
    }
    tracing::info!(users, %anonymous, "authentication");
    if users > 0 && !refuses_anonymous && !anonymous_restricted {
        // New-user pass: users tried on loopback seemed to restrict nothing.
        tracing::warn!(
            %anonymous,
            "users are configured, but clients that do not log in are admitted here with every right (admin included): the users' rules restrict only those who log in; set anonymous = \"deny\" or anonymous_rules in [auth] to restrict the others (docs/security.md)"
        );
    }
    if anonymous_queues_open && !refuses_anonymous {
        tracing::warn!(
            %anonymous,
            "anonymous_rules has no queues rule: clients that do not log in may create, bind, show, purge and delete every queue (their subscribe rules still limit what a bound queue delivers); add queues = {{ allow = [] }} (none) or the names they may use to [auth.anonymous_rules] (docs/security.md)"
        );
    }
    // A field that is None is left out of the line.
    let tls_listen = router.tls_addr().map(|a| a.to_string());
    tracing::info!(
        listen = %router.local_addr(),
        tls_listen = tls_listen.as_deref(),
        idle = %settings.0,
        slow_consumer = %settings.1,
        egress_limit = settings.2,
        egress_memory_limit = settings.3,
        max_frame = settings.4,
        max_clients = settings.5,
        "router started"
    );
    // Tests and scripts wait for this line on stdout to learn the bound address (its
    // last word is the plaintext listener's address): the TLS and shared-memory
    // listeners come before it.
    let mut others: Vec<String> = Vec::new();
    if let Some(tls) = router.tls_addr() {
        others.push(format!("{}{tls}", tickwire_client::TLS_SCHEME));
    }
    if let Some(name) = &shm_name {
        others.push(format!("{}{name}", tickwire_shm::ADDR_PREFIX));
    }
    match others.is_empty() {
        true => println!("tickwire router listening on {}", router.local_addr()),
        false => println!(
            "tickwire router listening on {} and {}",
            others.join(", "),
            router.local_addr()
        ),
    }
    if let Some(server) = &server {
        crate::monitor::announce(server);
    }
    router.run().context("running the router")?;
    drop(temp_spool);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// New-user pass: `--shm-ring 1MiB` without --shm was silently ignored.
    #[test]
    fn shared_memory_flags_without_a_shared_memory_listener_are_refused() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            router: RouterArgs,
        }
        for flag in [["--shm-ring", "1MiB"], ["--shm-epoll-interval", "5us"]] {
            let cli = Cli::try_parse_from(["router", flag[0], flag[1]]).unwrap();
            let e = cli.router.to_config().unwrap_err().to_string();
            assert!(e.contains(flag[0]) && e.contains("add --shm NAME"), "{e}");
            let cli = Cli::try_parse_from(["router", flag[0], flag[1], "--shm", "x"]).unwrap();
            assert!(cli.router.to_config().is_ok());
        }
    }

    #[test]
    fn every_form_of_serdes_unknown_field_message_is_rewritten() {
        let text = "[log]\nlevl = 1\n";
        let span = Some(6..10);
        for (message, suggestion, list) in [
            ("unknown field `levl`, expected `level`", true, "level"),
            (
                "unknown field `levl`, expected `level` or `other`",
                true,
                "level other",
            ),
            (
                "unknown field `levl`, expected one of `a`, `level`, `b`",
                true,
                "a level b",
            ),
            ("unknown field `levl`, there are no fields", false, ""),
        ] {
            let m = unknown_key_message(text, span.clone(), message).unwrap();
            assert!(m.starts_with("unknown key \"levl\" in [log]"), "{m}");
            assert_eq!(m.contains("did you mean \"level\"?"), suggestion, "{m}");
            match list {
                "" => assert!(m.contains("no keys are known in [log]"), "{m}"),
                keys => assert!(m.contains(&format!("valid keys in [log]: {keys}")), "{m}"),
            }
        }
        assert_eq!(
            unknown_key_message(text, span, "invalid type: string"),
            None
        );
        // No span (the host-name path): the key's line is searched for.
        let m = unknown_key_message(text, None, "unknown field `levl`, expected `level`");
        assert!(m.unwrap().contains("in [log]"));
    }

    /// New-user pass: a misspelt key of a `[[auth.users]]` entry itself got only
    /// `user "x": unknown key "pasword_hash"`, no place, suggestion or key list.
    #[test]
    fn an_unknown_key_of_a_user_entry_names_its_place_the_nearest_key_and_the_keys() {
        let text = "[[auth.users]]\nname = \"x\"\npasword_hash = \"a\"\n";
        let m = format!("{:#}", parse_config_file(text).err().unwrap());
        assert!(
            m.contains(
                "unknown key \"pasword_hash\" in [[auth.users]]; did you mean \"password_hash\"?"
            ),
            "{m}"
        );
        assert!(m.contains("line 3, column 1"), "{m}");
        assert!(m.contains("3 | pasword_hash = \"a\""), "{m}");
        assert!(
            m.contains("valid keys in [[auth.users]]:") && m.contains("allow_responses"),
            "{m}"
        );
        // The second user's: its own line.
        let two = "[[auth.users]]\nname = \"a\"\ntoken_sha256 = \"ab\"\n\n[[auth.users]] # b\n\
                   name = \"b\"\ntokn_sha256 = \"ab\"\n";
        let m = format!("{:#}", parse_config_file(two).err().unwrap());
        assert!(m.contains("did you mean \"token_sha256\"?"), "{m}");
        assert!(m.contains("7 | tokn_sha256 = \"ab\""), "{m}");
    }

    /// New-user pass: a typo inside an inline table of `[[auth.users]]` was reported
    /// `in [auth]`, quoting the `[[auth.users]]` header line (toml's span for it).
    #[test]
    fn an_unknown_key_in_an_array_elements_inline_table_names_it_and_its_line() {
        let text = "[router]\nlisten = \"127.0.0.1:7420\"\n\n[[auth.users]]\nname = \"alice\"\n\
                    token_sha256 = \"ab\"\nsubscribe = {alow=[\"x\"]}\n";
        let Err(e) = parse_config_file(text) else {
            panic!("alow was taken");
        };
        let m = format!("{e:#}");
        assert!(
            m.contains("unknown key \"alow\" in [[auth.users]] subscribe; did you mean \"allow\"?"),
            "{m}"
        );
        assert!(m.contains("TOML parse error at line 7, column 14"), "{m}");
        assert!(m.contains("7 | subscribe = {alow=[\"x\"]}"), "{m}");
        assert!(!m.contains("4 | [[auth.users]]"), "{m}");
        // Dotted, and in a sub-table of the element: the same.
        let dotted = "[[auth.users]]\nname = \"a\"\npublish.alow = [\"x\"]\n";
        let m = format!("{:#}", parse_config_file(dotted).err().unwrap());
        assert!(m.contains("in [[auth.users]] publish;"), "{m}");
        assert!(m.contains("line 3, column 9"), "{m}");
        let sub = "[[auth.users]]\nname = \"a\"\n\n[auth.users.subscribe]\nalow = [\"x\"]\n";
        let m = format!("{:#}", parse_config_file(sub).err().unwrap());
        assert!(m.contains("in [auth.users.subscribe];"), "{m}");
        assert!(m.contains("line 5, column 1"), "{m}");
        // A key of [router] keeps toml's own place.
        let m = format!(
            "{:#}",
            parse_config_file("[router]\nlisen = 1\n").err().unwrap()
        );
        assert!(m.contains("unknown key \"lisen\" in [router]"), "{m}");
        assert!(m.contains("line 2"), "{m}");
    }

    #[test]
    fn config_file_listen_takes_a_host_name_like_the_flag() {
        let f = parse_config_file("[router]\nlisten = \"localhost:17420\"\n").unwrap();
        assert!(f.router.listen.ip().is_loopback(), "{}", f.router.listen);
        assert_eq!(f.router.listen.port(), 17420);
        let f = parse_config_file("[router]\ntls_listen = \"localhost:17443\"\n").unwrap();
        assert_eq!(f.router.tls_listen.map(|a| a.port()), Some(17443));
        // IP addresses as before; errors keep their line.
        let f = parse_config_file("[router]\nlisten = \"127.0.0.2:7420\"\n").unwrap();
        assert_eq!(f.router.listen.to_string(), "127.0.0.2:7420");
        let Err(e) = parse_config_file("[router]\nlisten = \"no.such.host.invalid:1\"\n") else {
            panic!("a name that does not resolve was taken");
        };
        assert!(
            format!("{e:#}").contains("[router] listen = no.such.host.invalid:1: cannot resolve"),
            "{e:#}"
        );
        // New-user pass: a port alone said "cannot resolve the host name".
        let Err(e) = parse_config_file("[router]\nlisten = \"7420\"\n") else {
            panic!("a port alone was taken");
        };
        assert!(
            format!("{e:#}").contains("\"7420\" is a port without an address"),
            "{e:#}"
        );
        let Err(e) = parse_config_file("[router]\nmax_clients = \"x\"\n") else {
            panic!("a string for a number was taken");
        };
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        // The log level is read before the rest (at start and on SIGHUP): a host name
        // in listen must not stop it.
        let text = "[router]\nlisten = \"localhost:17420\"\n[log]\nlevel = \"debug\"\n";
        assert_eq!(log_level_of(text).unwrap().as_deref(), Some("debug"));
        assert_eq!(log_level_of("[router]\n").unwrap(), None);
        assert!(log_level_of("[log]\nlevell = \"x\"\n").is_err());
    }
}
