//! tickwire client.
