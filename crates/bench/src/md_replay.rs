//! The market-data replay test (docs/benchmarking.md family C): the synthetic exchange,
//! the feed handler and the router, measured end to end by subscriber clients.
//!
//! - [`repro`]: `tickwire bench md-replay`, the whole test in one command.
//! - [`latency`]: `tickwire bench md-latency`, the measuring clients.
//! - [`raw`]: the raw floor the replay compares with (`--compare tickwire,raw`).

pub mod latency;
pub mod raw;
pub mod repro;
