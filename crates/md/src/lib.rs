//! tickwire market data: the synthetic exchange, order books and the feed handler.
pub mod book;
pub mod feed;
pub mod generator;
pub mod update;
pub mod exchange;
pub mod publisher;
pub mod handler;
pub mod latency;
pub mod repro;
