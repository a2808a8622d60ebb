//! tickwire market data: the synthetic exchange, order books and the feed handler.
pub mod book;
pub mod exchange;
pub mod feed;
pub mod generator;
pub mod handler;
pub mod order_map;
pub mod publisher;
pub mod update;
