//! tickwire's benchmark suite (`tickwire bench ...`): open-loop load, HDR histograms,
//! reports that follow `docs/benchmarking.md`.
//!
//! - [`schedule`]: when each message is due (steady rate, bursts) and how big (size mix). Pure.
//! - [`stats`]: latency histograms, summaries, correctness counters, the INVALID rule. Pure.
//! - [`report`]: machine metadata, the terminal table, JSON, SVG plots.
//! - [`pingpong`], [`stream`], [`fanout`], [`tick_to_trade`]: the bench drivers (IO).
//! - [`md_replay`]: the market-data replay test and its measuring clients.
#![forbid(unsafe_code)]

pub mod fanout;
pub mod harness;
pub mod md_replay;
pub mod pingpong;
pub mod report;
pub mod schedule;
pub mod stats;
pub mod stream;
pub mod tick_to_trade;
