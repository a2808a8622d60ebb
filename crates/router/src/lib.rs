//! tickwire router: a topic pub/sub message router over TCP.
//!
//! Layers, bottom up:
//! - [`index`]: the subscription trie (pure);
//! - [`auth`]: users, tokens, groups and their publish / subscribe / queue rules (pure);
//! - [`egress`]: a client's bounded egress buffer with the slow-consumer discard policy (pure);
//! - [`core`]: every client's protocol state, routing and counters (pure: bytes and time in,
//!   bytes out);
//! - [`mcast`]: the router as a reliable multicast sender for configured topics (pure);
//! - [`gm`]: guaranteed messaging: queues, acknowledged publishing, redelivery (pure);
//! - [`driver`]: the single-threaded mio event loop that owns the sockets;
//! - [`monitor`]: the heartbeat and on-request snapshots the loop publishes, without a
//!   lock, to a monitoring thread (`tickwire router --http`).
//!
//! Run one with [`Router::bind`] and [`Router::run`]; stop it from another thread with
//! [`RouterHandle::shutdown`].
#![forbid(unsafe_code)]

pub mod auth;
pub mod cache;
pub mod config;
pub mod core;
pub mod driver;
pub mod egress;
pub mod gm;
pub mod groups;
pub mod index;
pub mod limit;
pub mod mcast;
pub mod monitor;
pub mod spool_port;

pub use config::{parse_router_idle, Config, IdleStrategy, SlowConsumerPolicy, ROUTER_IDLE};
pub use driver::{Router, RouterHandle};
