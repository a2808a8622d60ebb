//! The raw fan-out floor's wire format and its two client ends (docs/benchmarking.md,
//! "The raw fan-out floor").
//!
//! A frame is `[u32 len, little-endian][u16 topic, little-endian][payload]`, `len`
//! counting the topic and the payload. There is no protocol beyond it: a connection's
//! first frame is a HELLO ([`CONTROL`] topic, payload = the `u16` topics it subscribes
//! to, none for a publisher), which the relay answers with an empty [`CONTROL`] frame
//! once the connection is in its fixed topic -> subscribers table. Every later frame is
//! copied, bytes unchanged, to the subscribers of its topic.
//!
//! [`split`] is the one decoder, used by the relay ([`super::relay`]) and by
//! [`RawSub`]: a flyweight over `&[u8]` that never panics on hostile input and refuses
//! lengths above [`MAX_FRAME`] before anything is buffered for them.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context};
use tickwire_rt::IdleStrategy;

/// The topic of the HELLO frame and of the relay's answer to it.
pub const CONTROL: u16 = u16::MAX;

/// Bytes before the payload: length and topic.
pub const HEADER: usize = 6;

/// The longest frame (length field value) the relay and the subscribers accept.
pub const MAX_FRAME: usize = 64 * 1024;

/// Read buffer of a subscriber and of each relay connection (the router's largest read
/// buffer by default, ARCHITECTURE.md loop step 3).
pub const READ_BUFFER: usize = 256 * 1024;

/// How long a client waits for the relay's answer to its HELLO.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// One complete frame at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub topic: u16,
    pub payload: &'a [u8],
    /// Bytes the frame takes in the buffer (header included).
    pub len: usize,
}

/// A length field the relay refuses: the connection is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadLength(pub u32);

impl std::fmt::Display for BadLength {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "frame length {} outside 2..={MAX_FRAME}", self.0)
    }
}

/// The frame at the start of `buf`: `Ok(None)` while it is incomplete, an error when
/// its length field is below 2 (no room for the topic) or above [`MAX_FRAME`].
pub fn split(buf: &[u8]) -> Result<Option<Frame<'_>>, BadLength> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
    if len < 2 || len as usize > MAX_FRAME {
        return Err(BadLength(len));
    }
    let total = 4 + len as usize;
    let Some(frame) = buf.get(..total) else {
        return Ok(None);
    };
    Ok(Some(Frame {
        topic: u16::from_le_bytes([frame[4], frame[5]]),
        payload: &frame[HEADER..],
        len: total,
    }))
}

/// Appends one frame to `out` (no allocation once `out` has the capacity).
pub fn encode(out: &mut Vec<u8>, topic: u16, payload: &[u8]) {
    let len = (2 + payload.len()) as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&topic.to_le_bytes());
    out.extend_from_slice(payload);
}

/// A HELLO frame subscribing to `topics`.
pub fn hello(topics: &[u16]) -> Vec<u8> {
    let payload: Vec<u8> = topics.iter().flat_map(|t| t.to_le_bytes()).collect();
    let mut out = Vec::with_capacity(HEADER + payload.len());
    encode(&mut out, CONTROL, &payload);
    out
}

/// The topics of a HELLO payload (an odd trailing byte is ignored).
pub fn hello_topics(payload: &[u8]) -> impl Iterator<Item = u16> + '_ {
    payload
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// Connects to the relay, says HELLO with `topics` and waits for the answer: from then
/// on the relay forwards those topics to this connection.
fn connect(addr: SocketAddr, name: &str, topics: &[u16]) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)
        .with_context(|| format!("connecting {name} to the raw relay at {addr}"))?;
    s.set_nodelay(true)?;
    s.write_all(&hello(topics))
        .with_context(|| format!("{name} saying hello to the raw relay"))?;
    s.set_read_timeout(Some(HELLO_TIMEOUT))?;
    let mut answer = [0u8; HEADER];
    s.read_exact(&mut answer)
        .with_context(|| format!("{name} waiting for the raw relay's answer"))?;
    match split(&answer) {
        Ok(Some(f)) if f.topic == CONTROL && f.payload.is_empty() => Ok(s),
        other => bail!("{name}: unexpected answer from the raw relay: {other:?}"),
    }
}

/// A publishing connection to the relay, batching like the tickwire client: frames are
/// queued until `batch_bytes` are pending or [`RawPub::flush`] (called before the
/// publisher waits for its next slot).
pub struct RawPub {
    stream: TcpStream,
    out: Vec<u8>,
    batch_bytes: usize,
}

impl RawPub {
    pub fn connect(addr: SocketAddr, name: &str, batch_bytes: usize) -> anyhow::Result<RawPub> {
        let stream = connect(addr, name, &[])?;
        Ok(RawPub {
            stream,
            out: Vec::with_capacity(batch_bytes + MAX_FRAME + HEADER),
            batch_bytes,
        })
    }

    #[inline]
    pub fn send(&mut self, topic: u16, payload: &[u8]) -> anyhow::Result<()> {
        encode(&mut self.out, topic, payload);
        if self.out.len() >= self.batch_bytes {
            self.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> anyhow::Result<()> {
        if !self.out.is_empty() {
            self.stream
                .write_all(&self.out)
                .context("writing to the raw relay")?;
            self.out.clear();
        }
        Ok(())
    }

    /// Final flush, then shuts the connection down for writing (the relay reads to the
    /// end before it drops the connection).
    pub fn close(mut self) -> anyhow::Result<()> {
        self.flush()?;
        let _ = self.stream.shutdown(Shutdown::Write);
        Ok(())
    }
}

/// A subscribing connection to the relay: one read per poll, then every complete frame.
pub struct RawSub {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl RawSub {
    /// Connects and subscribes to `topics` (indices into the workload's topics); `idle`
    /// sets the socket up for the way [`RawSub::poll`] will wait.
    pub fn connect(
        addr: SocketAddr,
        name: &str,
        topics: &[u16],
        idle: IdleStrategy,
        block_slice: Duration,
    ) -> anyhow::Result<RawSub> {
        let stream = connect(addr, name, topics)?;
        match idle {
            IdleStrategy::Block => stream.set_read_timeout(Some(block_slice))?,
            IdleStrategy::Spin | IdleStrategy::Yield | IdleStrategy::Hybrid => {
                stream.set_nonblocking(true)?
            }
        }
        Ok(RawSub {
            stream,
            buf: vec![0; READ_BUFFER],
            start: 0,
            end: 0,
        })
    }

    /// One read (waiting up to the block slice when the socket blocks), then
    /// `f(topic, payload)` for every complete frame. Returns how many were handled.
    pub fn poll(&mut self, mut f: impl FnMut(u16, &[u8])) -> anyhow::Result<usize> {
        if self.end == self.buf.len() {
            // `split` bounds a frame to MAX_FRAME < READ_BUFFER, so a full buffer has a
            // consumed prefix to drop.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        use std::io::ErrorKind::{Interrupted, TimedOut, WouldBlock};
        let n = match self.stream.read(&mut self.buf[self.end..]) {
            Ok(0) => bail!("the raw relay closed the connection"),
            Ok(n) => n,
            // Nothing within the block slice (or a non-blocking socket had nothing).
            Err(e) if [WouldBlock, TimedOut, Interrupted].contains(&e.kind()) => return Ok(0),
            Err(e) => return Err(e).context("reading from the raw relay"),
        };
        self.end += n;
        let mut handled = 0;
        loop {
            match split(&self.buf[self.start..self.end]) {
                Ok(Some(fr)) => {
                    f(fr.topic, fr.payload);
                    self.start += fr.len;
                    handled += 1;
                }
                Ok(None) => break,
                Err(e) => bail!("from the raw relay: {e}"),
            }
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(handled)
    }
}

impl std::os::fd::AsFd for RawSub {
    /// The socket, for a thread that polls several subscribers with `poll(2)`.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frames(msgs: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (t, p) in msgs {
            encode(&mut out, *t, p);
        }
        out
    }

    /// Decodes a stream fed in the given chunk sizes, keeping unconsumed bytes as a
    /// reader would.
    fn decode_in_chunks(bytes: &[u8], chunks: &[usize]) -> Result<Vec<(u16, Vec<u8>)>, BadLength> {
        let mut got = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut at = 0;
        let mut sizes = chunks.iter().cycle();
        while at < bytes.len() {
            let n = (*sizes.next().unwrap_or(&1)).max(1).min(bytes.len() - at);
            pending.extend_from_slice(&bytes[at..at + n]);
            at += n;
            let mut used = 0;
            while let Some(f) = split(&pending[used..])? {
                got.push((f.topic, f.payload.to_vec()));
                used += f.len;
            }
            pending.drain(..used);
        }
        Ok(got)
    }

    #[test]
    fn a_frame_is_length_topic_payload() {
        let b = frames(&[(7, b"abc".to_vec())]);
        assert_eq!(b, [5, 0, 0, 0, 7, 0, b'a', b'b', b'c']);
        let f = split(&b).unwrap().unwrap();
        assert_eq!((f.topic, f.payload, f.len), (7, &b"abc"[..], 9));
    }

    #[test]
    fn incomplete_frames_wait_and_bad_lengths_are_refused() {
        let b = frames(&[(1, vec![9; 10])]);
        for cut in 0..b.len() {
            assert_eq!(split(&b[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(split(&[0, 0, 0, 0, 1, 2]), Err(BadLength(0)));
        assert_eq!(split(&[1, 0, 0, 0, 1]), Err(BadLength(1)));
        let huge = (MAX_FRAME as u32 + 1).to_le_bytes();
        assert_eq!(split(&huge), Err(BadLength(MAX_FRAME as u32 + 1)));
        assert_eq!(split(&[0xFF; 4]), Err(BadLength(u32::MAX)));
        // The largest allowed length waits for its bytes, buffering nothing itself.
        assert_eq!(split(&(MAX_FRAME as u32).to_le_bytes()), Ok(None));
    }

    #[test]
    fn hello_carries_the_topics() {
        let h = hello(&[3, 500]);
        let f = split(&h).unwrap().unwrap();
        assert_eq!(f.topic, CONTROL);
        assert_eq!(hello_topics(f.payload).collect::<Vec<_>>(), [3, 500]);
        assert_eq!(hello_topics(&[1, 0, 9]).collect::<Vec<_>>(), [1]);
    }

    proptest! {
        /// Any split of a valid stream decodes to the frames sent, in order.
        #[test]
        fn any_split_of_a_stream_decodes_to_what_was_sent(
            msgs in prop::collection::vec((0u16..2000, prop::collection::vec(any::<u8>(), 0..300)), 0..20),
            chunks in prop::collection::vec(1usize..64, 1..8),
        ) {
            let bytes = frames(&msgs);
            prop_assert_eq!(decode_in_chunks(&bytes, &chunks), Ok(msgs));
        }

        /// Hostile bytes never panic; every frame found lies inside the input and
        /// respects the length bound.
        #[test]
        fn hostile_bytes_never_panic_or_overrun(
            bytes in prop::collection::vec(any::<u8>(), 0..2000),
        ) {
            let mut at = 0;
            while let Ok(Some(f)) = split(&bytes[at..]) {
                prop_assert!(f.len >= HEADER && f.len <= 4 + MAX_FRAME);
                prop_assert!(at + f.len <= bytes.len());
                prop_assert_eq!(f.payload.len(), f.len - HEADER);
                at += f.len;
            }
        }
    }
}
