//! tickwire market data: the synthetic exchange, order books and the feed handler.
