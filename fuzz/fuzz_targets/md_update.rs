//! Decodes arbitrary bytes as a normalized market-data update payload
//! (`tickwire_md::update`, layout in docs/market-data.md).
//!
//! Checks: `decode` never panics; whatever decodes re-encodes to exactly the input
//! bytes (the layout has no slack: fixed lengths, zero reserved bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwire_md::book::Side;
use tickwire_md::update::{decode, encode_depth, encode_quote, encode_trade, Update};

fuzz_target!(|data: &[u8]| {
    let Ok(u) = decode(data) else {
        return;
    };
    let mut out = Vec::new();
    match u {
        Update::Trade(h, t) => encode_trade(&mut out, &h, &t),
        Update::Quote(h, q) => encode_quote(&mut out, &h, &q),
        Update::Depth(h, d) => {
            assert!(d.count(Side::Buy) <= tickwire_md::update::MAX_DEPTH_LEVELS);
            encode_depth(&mut out, &h, d.levels(Side::Buy), d.levels(Side::Sell))
        }
    }
    assert_eq!(out, data, "{u:?} re-encodes differently");
});
