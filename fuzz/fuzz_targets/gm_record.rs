//! The guaranteed-messaging spool record codec (`tickwire_router::gm::record`) on
//! arbitrary bytes: a spool file read back after a crash or by a newer version may hold
//! anything.
//!
//! Checks: `decode` never panics; whatever decodes re-encodes to bytes that decode to
//! the same record, and re-encoding that is stable (encode ∘ decode is a fixed point).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwire_router::gm::record::{decode, encode};

fuzz_target!(|data: &[u8]| {
    let Ok(r) = decode(data) else {
        return;
    };
    let mut once = Vec::new();
    encode(&mut once, &r);
    let again = decode(&once)
        .unwrap_or_else(|e| panic!("{r:?} re-encodes to bytes that do not decode: {e}"));
    assert_eq!(again, r, "the round trip changed the record");
    let mut twice = Vec::new();
    encode(&mut twice, &again);
    assert_eq!(once, twice, "re-encoding is not stable");
});
