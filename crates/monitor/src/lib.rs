//! tickwire's monitoring endpoint, shared by the router, the feed handler and the FIX
//! engine (`--http ADDR`):
//! - [`http`]: a small HTTP/1.1 server (GET/HEAD, one request per connection) whose
//!   every resource is bounded, on its own threads;
//! - [`credentials`]: the `Authorization` header (Basic, Bearer), parsed as hostile input;
//! - [`prom`]: the Prometheus text format;
//! - [`latency`]: HDR histograms of a latency probe, cumulative and per interval;
//! - [`dashboard`]: the web dashboard, embedded in the binary (no CDN, no build step).
//!
//! The endpoint never runs on a hot thread. What it shows comes from counters the hot
//! thread publishes without a lock (see `tickwire_router::monitor`); this crate knows
//! nothing about the components it serves: each gives a [`http::Handler`].
#![forbid(unsafe_code)]

pub mod credentials;
pub mod dashboard;
pub mod http;
pub mod latency;
pub mod prom;
pub mod query;

pub use http::{Handler, Limits, Request, Response, Server};
pub use latency::Latency;
pub use query::Query;
