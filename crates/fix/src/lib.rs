//! tickwire FIX engine core. Pure protocol parts (codec, dictionary, validation,
//! session state machine; time is always a parameter) plus the message stores.

pub mod codec;
pub mod dict;
pub mod order;
pub mod session;
pub mod settings;
pub mod store;
pub mod validate;
