//! tickwire wire protocol: the binary frame codec and the topic / pattern syntax.
//!
//! Pure code: no IO, no clock, no allocation on the decode path.
#![forbid(unsafe_code)]
// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

pub mod frame;
pub mod gm;
pub mod mcast_route;
pub mod topic;
