//! Drives the real router core (`tickwire_router::core::Core`) with arbitrary bytes
//! from arbitrary clients, the way the driver (`crates/router/src/driver.rs`) does:
//! per-client read buffer, `handle_input`, keep the unconsumed tail, drain the egress
//! to the "socket" in arbitrary amounts (`handle_written`), fire the timers
//! (`handle_timeout`), remove closed clients (`handle_closed`), and end each step as
//! the driver ends a turn (`poll_closing`, which also removes part of closing clients'
//! subscriptions).
//!
//! Replaces the old `frame_stream` target, which fuzzed a re-implementation of the
//! reassembly loop instead of the router.
//!
//! With the policy byte's bit 2 the router requires a login (tokens, with publish and
//! subscribe rules: see `auth`), and HELLO operations may log in, right or wrong.
//!
//! Input: a list of operations, each one opcode byte followed by its arguments (see
//! `step`). Besides raw bytes, operations can send a well-formed HELLO, SUBSCRIBE or
//! PUBLISH built from fuzz bytes, so the fuzzer reaches routing without first having
//! to guess a valid handshake. The configuration is small (4 KiB frames, 16 KiB
//! egress limit, 8 clients, 8 subscriptions) so the limits are reachable.
//!
//! Checks, after every operation:
//! - nothing panics;
//! - `handle_input` never reports more bytes consumed than it was given, and what it
//!   leaves unconsumed is less than `frame_limit` (a HELLO's size before the
//!   handshake, `max_frame` after): the driver's read buffer stays bounded;
//! - after `handle_timeout`, `poll_timeout` is never in the past;
//! - a client for which `handle_input` returned `Closing` is in phase `Closing` (or gone),
//!   and `live()` equals the number of clients accepted and not removed;
//! - everything the router writes to a client is a sequence of well-formed frames;
//! - under the disconnect policy, the MESSAGE bytes queued for a client never exceed
//!   the egress limit (control frames are accounted separately);
#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use tickwire_router::auth::{token_sha256, AllowDeny, Anonymous, AuthConfig, Rules, UserConfig};
use tickwire_router::core::{Core, Input, Phase};
use tickwire_router::index::Slot;
use tickwire_router::{Config, SlowConsumerPolicy};
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{self, Frame, PublishOptions, PROTOCOL_VERSION};

const MAX_FRAME: u32 = 4096;
const EGRESS_LIMIT: usize = 16 << 10;
/// The last-value cache of every run: every topic, the last 2 messages, small bounds.
const CACHE_DEPTH: usize = 2;
const CACHE_MAX_TOPICS: usize = 8;
const CACHE_MAX_BYTES: usize = 4096;
const MAX_CLIENTS: usize = 8;

/// One connected client as the driver and the client on the other end see it.
struct Conn {
    id: Slot,
    /// Bytes read but not yet consumed by the core (the driver's read buffer).
    rbuf: Vec<u8>,
    /// Bytes written to the client but not yet decoded (the client's receive buffer).
    rx: Vec<u8>,
    /// The core said this client is closing.
    closing: bool,
}

#[path = "common/cursor.rs"]
mod cursor;
use cursor::Cursor;

struct World {
    core: Core,
    conns: Vec<Conn>,
    now: MonoNanos,
    scratch: Vec<u8>,
}

impl World {
    fn feed(&mut self, k: usize, bytes: &[u8]) {
        let Some(c) = self.conns.get_mut(k) else {
            return;
        };
        if c.closing {
            return;
        }
        c.rbuf.extend_from_slice(bytes);
        // Fed again while the core pauses at its subscription work bound, as the driver
        // does on the next turns (before reading more).
        let mut fresh = bytes.len();
        let mut input = self.core.handle_input(c.id, self.now, &c.rbuf, fresh);
        while let (Input::Consumed(n), true) = (input, self.core.input_paused()) {
            assert!(
                n > 0 && n <= c.rbuf.len(),
                "a paused call consumed {n} of {}",
                c.rbuf.len()
            );
            c.rbuf.drain(..n);
            fresh = 0;
            input = self.core.handle_input(c.id, self.now, &c.rbuf, fresh);
        }
        match input {
            Input::Consumed(n) => {
                assert!(n <= c.rbuf.len(), "consumed {n} of {}", c.rbuf.len());
                c.rbuf.drain(..n);
                // Before HELLO the limit is a HELLO's size, after it max_frame.
                let limit = self.core.frame_limit(c.id) as usize;
                assert!(limit <= MAX_FRAME as usize);
                assert!(
                    c.rbuf.len() < limit,
                    "{} bytes left unconsumed with a frame limit of {limit}",
                    c.rbuf.len()
                );
            }
            Input::Closing => {
                c.closing = true;
                c.rbuf.clear();
                assert!(
                    matches!(self.core.phase(c.id), Some(Phase::Closing) | None),
                    "handle_input returned Closing but the phase is {:?}",
                    self.core.phase(c.id)
                );
            }
        }
    }

    /// Drains up to `n` bytes of client `k`'s egress to its "socket".
    fn write(&mut self, k: usize, n: usize) {
        let Some(c) = self.conns.get_mut(k) else {
            return;
        };
        let egress = self.core.egress(c.id);
        let n = n.min(egress.len());
        c.rx.extend_from_slice(&egress[..n]);
        self.core.handle_written(c.id, n);
        loop {
            match frame::decode(&c.rx, u32::MAX) {
                Ok(Some((_, used))) => {
                    c.rx.drain(..used);
                }
                Ok(None) => break,
                Err(e) => panic!("the router wrote a malformed frame: {e}"),
            }
        }
    }

    fn check(&self, discard: bool) {
        let live = self.conns.len();
        assert_eq!(self.core.live(), live);
        if discard {
            return;
        }
        for c in &self.conns {
            // Only when the client's receive side is at a frame boundary does the
            // egress start with a whole frame.
            if !c.rx.is_empty() {
                continue;
            }
            let mut rest = self.core.egress(c.id);
            let mut message_bytes = 0usize;
            while let Ok(Some((f, used))) = frame::decode(rest, u32::MAX) {
                if matches!(f, Frame::Message(_)) {
                    message_bytes += used;
                }
                rest = &rest[used..];
            }
            // An initial image is queued whole beyond the limit, bounded by the cache
            // (its bytes plus the 8-byte CACHED field of each of its messages).
            let image_bound = CACHE_MAX_BYTES + 8 * CACHE_MAX_TOPICS * CACHE_DEPTH;
            assert!(
                message_bytes <= EGRESS_LIMIT + image_bound,
                "{message_bytes} bytes of MESSAGE queued, limit {EGRESS_LIMIT} + image {image_bound}"
            );
        }
    }

    fn step(&mut self, cur: &mut Cursor<'_>) -> Option<()> {
        let op = cur.u8()?;
        let k = usize::from(cur.u8()?) % MAX_CLIENTS.max(1);
        match op % 10 {
            0 => {
                let addr = SocketAddr::from(([127, 0, 0, 1], 40_000 + k as u16));
                if let Ok(id) = self.core.handle_accept(addr, self.now, UtcNanos(0)) {
                    self.conns.push(Conn {
                        id,
                        rbuf: Vec::new(),
                        rx: Vec::new(),
                        closing: false,
                    });
                } else {
                    // At the limit, counting the slots whose subscriptions are still
                    // being removed (they are not reused before).
                    assert!(
                        self.conns.len() >= MAX_CLIENTS || self.core.has_pending_teardown(),
                        "refused below the limit with no teardown pending"
                    );
                }
            }
            1 => {
                let n = usize::from(cur.u8()?);
                let bytes = cur.bytes(n).to_vec();
                self.feed(k, &bytes);
            }
            2 => {
                let n = usize::from(cur.u8()? % 80);
                let name = String::from_utf8_lossy(cur.bytes(n)).into_owned();
                let how = cur.u8()?;
                let version = if how == 0 { 0 } else { PROTOCOL_VERSION };
                self.scratch.clear();
                if how & 2 != 0 {
                    // A login: one of the configured tokens, or a wrong one.
                    frame::encode_hello_caps(&mut self.scratch, version, frame::caps::AUTH, &name);
                    let token: &[u8] = [&b"r"[..], b"o", b"wrong"][usize::from(how >> 2) % 3];
                    let auth = frame::Auth {
                        method: frame::AuthMethod::Token,
                        user: "",
                        secret: token,
                    };
                    let _ = frame::encode_auth(&mut self.scratch, &auth);
                } else {
                    frame::encode_hello(&mut self.scratch, version, &name);
                }
                let b = std::mem::take(&mut self.scratch);
                self.feed(k, &b);
                self.scratch = b;
            }
            3 | 4 => {
                let n = usize::from(cur.u8()? % 32);
                let pattern = String::from_utf8_lossy(cur.bytes(n)).into_owned();
                self.scratch.clear();
                if op % 10 == 3 {
                    // Plain, with an initial image, or a cache query.
                    let image = match op / 10 % 3 {
                        0 => frame::Image::None,
                        1 => frame::Image::ThenLive,
                        _ => frame::Image::Only,
                    };
                    frame::encode_subscribe_image(
                        &mut self.scratch,
                        u32::from(op),
                        &pattern,
                        image,
                    );
                } else {
                    frame::encode_unsubscribe(&mut self.scratch, u32::from(op), &pattern);
                }
                let b = std::mem::take(&mut self.scratch);
                self.feed(k, &b);
                self.scratch = b;
            }
            5 => {
                let n = usize::from(cur.u8()? % 32);
                let topic = String::from_utf8_lossy(cur.bytes(n)).into_owned();
                let size = usize::from(cur.u8()?) * 16;
                let payload = vec![0xA5; size];
                let flags = cur.u8()?;
                let opts = PublishOptions {
                    seq: (flags & 1 != 0).then_some(u64::from(flags)),
                    publisher_send: (flags & 2 != 0).then_some(self.now.0),
                };
                self.scratch.clear();
                // Some are requests (REPLY with a reply topic): NO_RESPONDERS answers.
                let reply = (flags & 4 != 0).then_some(frame::ReplyField {
                    correlation: u32::from(flags),
                    to: b"_r/x",
                });
                if frame::encode_publish_reply(
                    &mut self.scratch,
                    &topic,
                    &payload,
                    opts,
                    reply,
                    MAX_FRAME,
                )
                .is_ok()
                {
                    let repeat = 1 + usize::from(flags >> 4);
                    let one = self.scratch.clone();
                    for _ in 1..repeat {
                        self.scratch.extend_from_slice(&one);
                    }
                    let b = std::mem::take(&mut self.scratch);
                    self.feed(k, &b);
                    self.scratch = b;
                }
            }
            6 => {
                let n = usize::from(cur.u8()?) * 64;
                self.write(k, n);
            }
            7 => {
                self.now = self.now.add_nanos(u64::from(cur.u8()?) * 50_000_000);
                self.core.handle_timeout(self.now);
                if let Some(d) = self.core.poll_timeout() {
                    assert!(d >= self.now, "the next deadline is already past");
                }
                for c in &mut self.conns {
                    if self.core.phase(c.id) == Some(Phase::Closing) {
                        c.closing = true;
                    }
                }
            }
            8 => {
                if k < self.conns.len() {
                    let c = self.conns.swap_remove(k);
                    self.core.handle_closed(c.id, "fuzz: connection closed");
                    assert_eq!(self.core.phase(c.id), None);
                }
            }
            _ => {
                let what = cur.u8()?;
                self.scratch.clear();
                match what % 3 {
                    0 => frame::encode_ping(&mut self.scratch, u64::from(what)),
                    1 => frame::encode_stats_request(&mut self.scratch, u32::from(what)),
                    _ => frame::encode_close(&mut self.scratch, frame::ErrorCode::NORMAL, "bye"),
                }
                let b = std::mem::take(&mut self.scratch);
                self.feed(k, &b);
                self.scratch = b;
                if what == 0xFF {
                    self.core.shutdown();
                    for c in &mut self.conns {
                        c.closing = true;
                    }
                }
            }
        }
        Some(())
    }
}

/// With policy bit 2: anonymous clients refused; token `r` subscribes inside `a/>` but
/// not `a/s/>` and publishes to `a/p/>` only; token `o` is an admin with no rule.
fn auth() -> AuthConfig {
    let list = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    AuthConfig {
        anonymous: Anonymous::Deny,
        users: vec![
            UserConfig {
                name: "reader".into(),
                token_sha256: Some(token_sha256(b"r")),
                rules: Rules {
                    subscribe: AllowDeny {
                        allow: Some(list(&["a/>"])),
                        deny: list(&["a/s/>"]),
                    },
                    publish: AllowDeny {
                        allow: Some(list(&["a/p/>"])),
                        deny: vec![],
                    },
                    ..Rules::default()
                },
                ..UserConfig::default()
            },
            UserConfig {
                name: "ops".into(),
                token_sha256: Some(token_sha256(b"o")),
                rules: Rules {
                    admin: true,
                    ..Rules::default()
                },
                max_connections: Some(2),
                ..UserConfig::default()
            },
        ],
        ..AuthConfig::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&policy, ops)) = data.split_first() else {
        return;
    };
    let discard = policy & 1 == 1;
    let cfg = Config {
        max_frame: MAX_FRAME,
        max_clients: MAX_CLIENTS,
        max_subscriptions: 8,
        egress_limit: EGRESS_LIMIT,
        slow_consumer: if discard {
            SlowConsumerPolicy::Discard
        } else {
            SlowConsumerPolicy::Disconnect
        },
        handshake_timeout_ms: 1_000,
        stall_timeout_ms: 2_000,
        read_buffer: MAX_FRAME as usize,
        // The last-value cache on every topic, with small bounds: publishes fill it
        // and evict, SUBSCRIBE frames with IMAGE / IMAGE_ONLY read it.
        cache: vec![">".into()],
        cache_depth: CACHE_DEPTH,
        cache_max_topics: CACHE_MAX_TOPICS,
        cache_max_bytes: CACHE_MAX_BYTES,
        auth: if policy & 2 != 0 {
            auth()
        } else {
            AuthConfig::default()
        },
        ..Config::default()
    };
    let mut w = World {
        core: Core::new(cfg, MonoNanos(1_000_000_000), UtcNanos(0)),
        conns: Vec::new(),
        now: MonoNanos(1_000_000_000),
        scratch: Vec::new(),
    };
    let mut cur = Cursor(ops);
    let mut closing = Vec::new();
    while w.step(&mut cur).is_some() {
        // Each turn of the driver ends with this (it also removes a bounded part of
        // closing clients' subscriptions).
        w.core.poll_closing(&mut closing);
        closing.clear();
        w.check(discard);
    }
    // Drain everything: what is left must still be well-formed.
    for k in 0..w.conns.len() {
        w.write(k, usize::MAX);
    }
});
