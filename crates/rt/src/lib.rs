//! tickwire runtime: the small pieces every driver shares, and nothing else.
//!
//! This crate depends on no other tickwire crate; everything else may depend on it.
//! Pure protocol cores use only its *types* ([`MonoNanos`], [`UtcNanos`]) and receive
//! time as a parameter; only drivers call the `now` functions.
#![forbid(unsafe_code)]

pub mod bucket;
pub mod child;
pub mod files;
pub mod idle;
pub mod latency;
pub mod pacing;
pub mod paths;
pub mod pin;
pub mod progress;
pub mod snapshot;
pub mod stop;
pub mod text;
pub mod time;
pub mod units;

pub use bucket::TokenBucket;
pub use idle::IdleStrategy;
pub use latency::{Latency, Summary};
pub use progress::Progress;
pub use stop::StopFlag;
pub use time::{MonoNanos, UtcNanos};
