//! tickwire router: subscription index, routing core and event-loop driver.
#![forbid(unsafe_code)]

pub mod index;
