//! Feeds arbitrary bytes in arbitrary chunks through the reassembly loop a router (or
//! client) runs on a socket: a fixed receive buffer of `max_frame` bytes, filled by
//! "reads" of whatever size arrives, drained by `decode` after every read.
//!
//! Input: 2 bytes choosing `max_frame` (8 ..= 4 103), 4 bytes choosing read sizes
//! (1 ..= 256, cycled), then the byte stream.
//!
//! Checks:
//! - nothing panics, and the buffer never holds more than `max_frame` bytes;
//! - a full buffer always holds a complete frame or an error (a reader that stopped
//!   reading because its buffer is full would otherwise wait forever);
//! - the frames, and the error or leftover at the end, are exactly those of decoding
//!   the whole stream in one piece: chunking never changes the outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwire_wire::frame::{decode, FrameError, HEADER_LEN};

#[derive(Debug, PartialEq)]
enum End {
    /// The stream ended with these bytes of an incomplete frame.
    Partial(usize),
    /// The reader hit this error (and would close the connection).
    Failed(FrameError),
}

fuzz_target!(|data: &[u8]| {
    let Some((head, stream)) = data.split_first_chunk::<6>() else {
        return;
    };
    let max_frame = HEADER_LEN as u32 + u32::from(u16::from_le_bytes([head[0], head[1]]) % 4096);
    let reads: Vec<usize> = head[2..].iter().map(|&b| usize::from(b) + 1).collect();

    // Reference: the whole stream at once.
    let mut whole_frames = Vec::new();
    let mut rest = stream;
    let whole_end = loop {
        match decode(rest, max_frame) {
            Ok(Some((_, n))) => {
                whole_frames.push(&rest[..n]);
                rest = &rest[n..];
            }
            Ok(None) => break End::Partial(rest.len()),
            Err(e) => break End::Failed(e),
        }
    };

    // The reader under test.
    let cap = max_frame as usize;
    let mut buf: Vec<u8> = Vec::with_capacity(cap);
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let mut input = stream;
    let mut turn = 0;
    let end = 'conn: loop {
        // One read: as much as arrived, as much as fits.
        let want = reads[turn % reads.len()]
            .min(cap - buf.len())
            .min(input.len());
        turn += 1;
        buf.extend_from_slice(&input[..want]);
        input = &input[want..];
        assert!(buf.len() <= cap, "buffered {} > max_frame {cap}", buf.len());

        // Drain every complete frame, then compact once (as a router does per turn).
        let mut start = 0;
        loop {
            match decode(&buf[start..], max_frame) {
                Ok(Some((_, n))) => {
                    assert!(n <= buf.len() - start);
                    frames.push(buf[start..start + n].to_vec());
                    start += n;
                }
                Ok(None) => break,
                Err(e) => break 'conn End::Failed(e),
            }
        }
        buf.drain(..start);
        assert!(
            buf.len() < cap,
            "a full buffer of {cap} bytes holds no complete frame"
        );
        if input.is_empty() {
            break End::Partial(buf.len());
        }
    };

    assert_eq!(end, whole_end);
    assert_eq!(frames.len(), whole_frames.len());
    for (a, b) in frames.iter().zip(&whole_frames) {
        assert_eq!(a.as_slice(), *b);
    }
});
