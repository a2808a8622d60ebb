//! tickwire wire protocol: the binary frame codec and the topic / pattern syntax.
//!
//! Pure code: no IO, no clock, no allocation on the decode path.
#![forbid(unsafe_code)]

pub mod frame;
pub mod topic;
