//! The two byte buffers of the receive path (pure, no IO).
//!
//! [`RxBuf`] holds bytes read from the socket; decoded frames are handed out as
//! borrowed slices of it, so a message costs no allocation. [`Stash`] keeps the raw
//! MESSAGE frames that arrive while the client waits for an answer to a request, so
//! they can be delivered later in their original order.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::ops::Range;

use tickwire_wire::frame::HEADER_LEN;

/// Reusable receive buffer with start / end cursors.
///
/// `buf[start..end]` holds received bytes not yet consumed. Bytes before `start` are
/// dead and reclaimed by [`RxBuf::spare`], which is only called when the caller is
/// about to read more; until then, ranges of consumed frames stay valid, which is
/// what lets a borrowed message outlive [`RxBuf::consume`].
#[derive(Debug)]
pub(crate) struct RxBuf {
    pub(crate) buf: Vec<u8>,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl RxBuf {
    /// A buffer of `capacity` bytes (at least one frame header).
    pub(crate) fn new(capacity: usize) -> RxBuf {
        RxBuf {
            buf: vec![0; capacity.max(HEADER_LEN)],
            start: 0,
            end: 0,
        }
    }

    /// Received bytes not yet consumed.
    #[inline]
    pub(crate) fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Marks `n` bytes at the front of [`RxBuf::data`] as consumed.
    ///
    /// The bytes themselves are left in place, so ranges handed out earlier stay valid
    /// until the next [`RxBuf::spare`].
    #[inline]
    pub(crate) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            // Empty: the next read starts at the front, no copy needed.
            self.start = 0;
            self.end = 0;
        }
    }

    /// Room to read into, after moving unconsumed bytes to the front.
    ///
    /// `frame_len` is the length of the (incomplete) frame at the front, if known: the
    /// buffer grows to hold it when it is larger than the buffer, and never beyond it
    /// (the caller has already checked it against its maximum frame size).
    pub(crate) fn spare(&mut self, frame_len: Option<usize>) -> &mut [u8] {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if let Some(len) = frame_len {
            if len > self.buf.len() {
                self.buf.resize(len, 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// Records that `n` bytes were written into the slice [`RxBuf::spare`] returned.
    #[inline]
    pub(crate) fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Bytes that can be read without compaction or growth.
    pub(crate) fn room(&self) -> usize {
        self.buf.len() - self.end + self.start
    }
}

/// Raw MESSAGE frames set aside while waiting for a reply, delivered first-in first-out.
#[derive(Debug, Default)]
pub(crate) struct Stash {
    pub(crate) buf: Vec<u8>,
    read: usize,
}

/// The most undelivered bytes the stash keeps: a router that sends messages without
/// end while the client waits for an answer (or one that never answers) must not make
/// it grow without bound (a hostile-input probe took a client to 3.5 GB in 15 s). Far
/// above what a real router sends while a client waits (an initial image is at most
/// the router's `cache_max_bytes`, 64 MiB by default); one frame always fits an empty
/// stash, whatever its size.
pub(crate) const MAX_STASH_BYTES: usize = 1 << 30;

impl Stash {
    /// Appends the bytes of one complete frame; false (nothing kept) when the frames
    /// not yet delivered would pass [`MAX_STASH_BYTES`].
    #[must_use]
    pub(crate) fn push(&mut self, frame: &[u8]) -> bool {
        if self.read == self.buf.len() {
            // Everything delivered: reuse the allocation from the front.
            self.buf.clear();
            self.read = 0;
        } else if self.read > self.buf.len() / 2 {
            // Mostly delivered: drop the delivered front, so that a stash never quite
            // emptied (a frame always left between pushes) does not grow by what was
            // delivered long ago.
            self.buf.drain(..self.read);
            self.read = 0;
        }
        let waiting = self.buf.len() - self.read;
        if waiting > 0 && waiting + frame.len() > MAX_STASH_BYTES {
            return false;
        }
        self.buf.extend_from_slice(frame);
        true
    }

    /// True when every stashed frame was delivered.
    pub(crate) fn is_empty(&self) -> bool {
        self.read >= self.buf.len()
    }

    /// Byte range in `buf` of the oldest undelivered frame, which counts as delivered.
    ///
    /// The range stays valid until the next [`Stash::push`].
    pub(crate) fn pop(&mut self) -> Option<Range<usize>> {
        let rest = self.buf.get(self.read..)?;
        let head = rest.get(..4)?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        // Only whole frames are pushed, so a length that runs past the end (or is
        // shorter than a header) cannot happen; stop rather than loop if it did.
        if len < HEADER_LEN || len > rest.len() {
            self.read = self.buf.len();
            return None;
        }
        let range = self.read..self.read + len;
        self.read += len;
        Some(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_wire::frame::{decode, encode_ping, Frame, DEFAULT_MAX_FRAME};

    fn ping(token: u64) -> Vec<u8> {
        let mut v = Vec::new();
        encode_ping(&mut v, token);
        v
    }

    fn fill(rx: &mut RxBuf, bytes: &[u8], frame_len: Option<usize>) {
        let spare = rx.spare(frame_len);
        spare[..bytes.len()].copy_from_slice(bytes);
        rx.commit(bytes.len());
    }

    #[test]
    fn consume_keeps_bytes_until_the_next_read() {
        let mut rx = RxBuf::new(64);
        let f = ping(1);
        fill(&mut rx, &f, None);
        assert_eq!(rx.data(), &f[..]);
        rx.consume(f.len());
        assert_eq!(rx.data(), &[] as &[u8]);
        // The consumed frame's bytes are still there for a borrowed view.
        assert_eq!(&rx.buf[..f.len()], &f[..]);
    }

    #[test]
    fn spare_compacts_a_partial_frame_to_the_front() {
        let mut rx = RxBuf::new(24);
        let (a, b) = (ping(1), ping(2));
        fill(&mut rx, &a, None);
        fill(&mut rx, &b[..5], None);
        rx.consume(a.len());
        assert_eq!(rx.start, a.len());
        let room = rx.room();
        let spare_len = rx.spare(None).len();
        assert_eq!((rx.start, rx.end), (0, 5));
        assert_eq!(spare_len, 24 - 5);
        assert_eq!(room, spare_len);
        fill(&mut rx, &b[5..], None);
        let (frame, n) = decode(rx.data(), DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!((frame, n), (Frame::Ping(2), b.len()));
    }

    #[test]
    fn spare_grows_for_a_large_frame_only() {
        let mut rx = RxBuf::new(16);
        fill(&mut rx, &[100, 0, 0, 0], None);
        assert_eq!(rx.spare(Some(100)).len(), 96);
        assert_eq!(rx.buf.len(), 100);
        // A smaller frame never shrinks or regrows it.
        assert_eq!(rx.spare(Some(10)).len(), 96);
    }

    #[test]
    fn stash_delivers_in_push_order_and_reuses_its_buffer() {
        let mut s = Stash::default();
        assert_eq!(s.pop(), None);
        assert!(s.push(&ping(1)));
        assert!(s.push(&ping(2)));
        let r = s.pop().unwrap();
        assert_eq!(
            decode(&s.buf[r], DEFAULT_MAX_FRAME).unwrap().unwrap().0,
            Frame::Ping(1)
        );
        // A push while frames are undelivered appends behind them.
        assert!(s.push(&ping(3)));
        for want in [2, 3] {
            let r = s.pop().unwrap();
            let (f, _) = decode(&s.buf[r], DEFAULT_MAX_FRAME).unwrap().unwrap();
            assert_eq!(f, Frame::Ping(want));
        }
        assert_eq!(s.pop(), None);
        let cap = s.buf.capacity();
        assert!(s.push(&ping(4)));
        assert_eq!(s.buf.len(), ping(4).len());
        assert_eq!(s.buf.capacity(), cap);
    }

    /// What is not yet delivered stays under MAX_STASH_BYTES; once delivered, the room
    /// is there again.
    #[test]
    fn the_stash_refuses_frames_beyond_its_bound() {
        let mut s = Stash::default();
        let frame = vec![0u8; 16 << 20];
        let fits = MAX_STASH_BYTES / frame.len();
        for _ in 0..fits {
            assert!(s.push(&frame));
        }
        assert!(!s.push(&frame));
        assert!(!s.push(&ping(1)));
        s.read = s.buf.len();
        assert!(s.push(&ping(1)));
        // A stash never quite emptied keeps only about twice what waits in it.
        let mut s = Stash::default();
        for i in 0..10_000u64 {
            assert!(s.push(&ping(i)));
            assert!(s.pop().is_some() || i == 0);
        }
        assert!(s.buf.len() <= 4 * ping(0).len(), "{}", s.buf.len());
        // One frame always fits an empty stash, whatever its size.
        let mut empty = Stash::default();
        assert!(empty.push(&vec![0u8; MAX_STASH_BYTES + 8]));
    }
}
