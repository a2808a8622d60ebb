//! Loads arbitrary bytes as a capture file (`tickwire replay` loads any file a user
//! points it at): the pcap reader, the record bounds and the Ethernet / raw IPv4 / UDP
//! parse, through `tickwire_capture::Captured::load`.
//!
//! Checks:
//! - nothing panics: what cannot be read is an error;
//! - every loaded datagram's payload lies inside the loaded arena (`payload` slices it);
//! - the payloads together are no larger than the file (nothing made up, memory in
//!   proportion to the file).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;
use tickwire_capture::Captured;

/// The one file each input is written to (the loader reads files), per process, in
/// the temporary directory: a private one `scripts/fuzz.sh` makes for each run.
fn input_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("tickwire-fuzz-pcap-{}.pcap", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = input_path();
    std::fs::write(path, data).expect("writing the input to its temporary file");
    if let Ok(c) = Captured::load(path) {
        let total: usize = c.entries.iter().map(|e| c.payload(e).len()).sum();
        assert!(
            total <= data.len(),
            "{total} payload bytes from a {}-byte file",
            data.len()
        );
    }
});
