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
//! - [`mcast_fanout`]: multicast fan-out to N receiver processes (`tickwire mcast`),
//!   reliable against plain UDP multicast, sender CPU per message.
//!
//! - [`console`]: where a command's report and progress lines go.
//!
//! Printing: none, as in every library crate (`clippy::print_stdout` /
//! `clippy::print_stderr` deny, workspace lints). Each command writes its report to the
//! [`console::Console`] its caller passes (the binary: stdout, and a progress sink on
//! stderr); warnings are `tracing` events.
#![forbid(unsafe_code)]

/// A bench command's flags that parse but cannot run together (a size too large for a
/// transport, a count of 0): reported like clap's usage errors, with exit status 2,
/// before anything is measured.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl UsageError {
    /// `e` (a flag check's error) as a usage error.
    pub fn of(e: anyhow::Error) -> anyhow::Error {
        UsageError(format!("{e:#}")).into()
    }
}

/// What a failed connection to NATS asks (new-user pass: "Connection refused" alone).
pub const NATS_HINT: &str = "is a nats-server running there? (`nats-server -a 127.0.0.1 -p \
     4222`; scripts/install-nats.sh installs one)";

pub mod bench_tls;
pub mod console;
pub mod fanout;
pub mod guaranteed;
pub mod harness;
pub mod host_watch;
pub mod mcast_fanout;
pub mod md_replay;
pub mod monitor_poll;
pub mod pingpong;
pub mod report;
pub mod schedule;
pub mod stats;
pub mod stream;
pub mod tick_to_trade;
