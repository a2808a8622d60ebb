//! tickwire's benchmark suite (`tickwire bench ...`): open-loop load, HDR histograms,
//! reports that follow `docs/benchmarking.md`.
//!
//! - [`schedule`]: when each message is due (steady rate, bursts) and how big (size mix). Pure.
//! - [`stats`]: latency histograms, summaries, correctness counters, the INVALID rule. Pure.
//! - [`report`]: machine metadata, the terminal table, JSON, SVG plots.
//! - [`pingpong`], [`stream`], [`fanout`], [`tick_to_trade`]: the bench drivers (IO).
//! - [`guaranteed`]: guaranteed messaging (publish->ACK, publish->delivery, lossless
//!   check) against tickwire or NATS JetStream.
//! - [`md_replay`]: the market-data replay test and its measuring clients.
//!
//! Printing: this crate is the exception to "libraries never print". It is the suite's
//! report writer, driven only by `tickwire bench ...` (nothing in the product depends on
//! it), and its drivers print their progress lines and the final report table to the
//! terminal as the binary would. Hence the `allow` below; every other library crate
//! denies `clippy::print_stdout` / `clippy::print_stderr` (workspace lints).
#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod fanout;
pub mod guaranteed;
pub mod harness;
pub mod md_replay;
pub mod pingpong;
pub mod report;
pub mod schedule;
pub mod stats;
pub mod stream;
pub mod tick_to_trade;
