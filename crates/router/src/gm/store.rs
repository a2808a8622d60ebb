//! The retained guaranteed messages, in memory: message bytes in recycled 1 MiB chunks
//! and one fixed-size entry per message id, so storing a message allocates nothing once
//! the chunks exist. Messages leave from the front, in id order, once no queue holds
//! them and they are past the retention limits.

use std::collections::VecDeque;

const CHUNK: usize = 1 << 20;

/// One stored message's metadata (its bytes live in a chunk).
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Message id.
    pub id: u64,
    /// Spool record number of the message record.
    pub lsn: u64,
    /// Router wall-clock time of arrival (ns since the epoch).
    pub time: u64,
    /// The publisher's sequence number.
    pub seq: u64,
    /// The publisher's send stamp and the router's receive stamp (0: none).
    pub stamps: Option<(u64, u64)>,
    chunk: u64,
    off: u32,
    topic_len: u16,
    payload_len: u32,
    /// Queues holding it.
    pub refs: u32,
    /// False for an id whose message was refused after its id was taken.
    pub live: bool,
    /// It may have been delivered before a router restart.
    pub maybe_delivered: bool,
}

/// What a new message carries.
pub struct NewMessage<'a> {
    pub id: u64,
    pub lsn: u64,
    pub time: u64,
    pub seq: u64,
    pub stamps: Option<(u64, u64)>,
    pub topic: &'a [u8],
    pub payload: &'a [u8],
}

struct Chunk {
    buf: Vec<u8>,
    live: u32,
}

/// The retained messages.
pub struct Store {
    chunks: VecDeque<Chunk>,
    /// Absolute number of `chunks[0]`.
    chunk_base: u64,
    spare: Vec<Vec<u8>>,
    entries: VecDeque<Entry>,
    /// Id of `entries[0]` (the next id when empty).
    first_id: u64,
    bytes: u64,
}

impl Store {
    /// An empty store whose first message id will be `next_id`.
    pub fn new(next_id: u64) -> Store {
        Store {
            chunks: VecDeque::new(),
            chunk_base: 0,
            spare: Vec::new(),
            entries: VecDeque::new(),
            first_id: next_id,
            bytes: 0,
        }
    }

    /// The id the next message gets.
    pub fn next_id(&self) -> u64 {
        self.first_id + self.entries.len() as u64
    }

    /// Oldest retained id (== `next_id` when empty).
    pub fn first_id(&self) -> u64 {
        self.first_id
    }

    /// Message bytes (topic + payload) retained.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Messages retained (live or not).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No message retained.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends a message; `m.id` must be [`Store::next_id`] (ids skipped on recovery are
    /// filled with dead entries).
    pub fn push(&mut self, m: &NewMessage<'_>) {
        while self.next_id() < m.id {
            let id = self.next_id();
            self.entries.push_back(Entry {
                id,
                lsn: 0,
                time: m.time,
                seq: 0,
                stamps: None,
                chunk: self.chunk_base + self.chunks.len() as u64,
                off: 0,
                topic_len: 0,
                payload_len: 0,
                refs: 0,
                live: false,
                maybe_delivered: false,
            });
        }
        if self.entries.is_empty() {
            self.first_id = m.id;
        }
        let need = m.topic.len() + m.payload.len();
        let fits = self
            .chunks
            .back()
            .is_some_and(|c| c.buf.capacity() - c.buf.len() >= need);
        if !fits {
            let mut buf = self.spare.pop().unwrap_or_default();
            buf.clear();
            buf.reserve(need.max(CHUNK));
            self.chunks.push_back(Chunk { buf, live: 0 });
        }
        let chunk_no = self.chunk_base + self.chunks.len() as u64 - 1;
        let Some(c) = self.chunks.back_mut() else {
            return;
        };
        let off = c.buf.len() as u32;
        c.buf.extend_from_slice(m.topic);
        c.buf.extend_from_slice(m.payload);
        c.live += 1;
        self.bytes += need as u64;
        self.entries.push_back(Entry {
            id: m.id,
            lsn: m.lsn,
            time: m.time,
            seq: m.seq,
            stamps: m.stamps,
            chunk: chunk_no,
            off,
            topic_len: m.topic.len() as u16,
            payload_len: m.payload.len() as u32,
            refs: 0,
            live: true,
            maybe_delivered: false,
        });
    }

    /// The entry of `id`, if retained.
    pub fn entry(&self, id: u64) -> Option<&Entry> {
        let i = id.checked_sub(self.first_id)?;
        self.entries.get(usize::try_from(i).ok()?)
    }

    /// The entry of `id`, mutably.
    pub fn entry_mut(&mut self, id: u64) -> Option<&mut Entry> {
        let i = id.checked_sub(self.first_id)?;
        self.entries.get_mut(usize::try_from(i).ok()?)
    }

    /// Topic and payload of a live message.
    pub fn bytes_of(&self, e: &Entry) -> (&[u8], &[u8]) {
        if !e.live {
            return (&[], &[]);
        }
        let Some(c) = e
            .chunk
            .checked_sub(self.chunk_base)
            .and_then(|i| self.chunks.get(i as usize))
        else {
            return (&[], &[]);
        };
        let at = e.off as usize;
        let t = at + e.topic_len as usize;
        let end = t + e.payload_len as usize;
        (&c.buf[at..t], &c.buf[t..end])
    }

    /// Size (topic + payload) of a message.
    pub fn size_of(e: &Entry) -> u64 {
        e.topic_len as u64 + e.payload_len as u64
    }

    /// Marks a message dead (refused after its id was taken).
    pub fn kill(&mut self, id: u64) {
        if let Some(e) = self.entry_mut(id) {
            if e.live {
                e.live = false;
                e.refs = 0;
                let size = Store::size_of(e);
                let chunk = e.chunk;
                self.bytes -= size;
                self.release_chunk(chunk);
            }
        }
    }

    fn release_chunk(&mut self, chunk: u64) {
        if let Some(c) = chunk
            .checked_sub(self.chunk_base)
            .and_then(|i| self.chunks.get_mut(i as usize))
        {
            c.live = c.live.saturating_sub(1);
        }
    }

    /// Drops messages from the front while no queue holds them and `keep` says they
    /// may go (retention). Returns how many went.
    pub fn release_front(&mut self, mut keep: impl FnMut(&Entry, u64) -> bool) -> usize {
        let mut n = 0;
        while let Some(e) = self.entries.front() {
            if e.live && (e.refs > 0 || keep(e, self.bytes)) {
                break;
            }
            let e = *e;
            self.entries.pop_front();
            self.first_id += 1;
            n += 1;
            if e.live {
                self.bytes -= Store::size_of(&e);
                self.release_chunk(e.chunk);
            }
        }
        // Chunks before the one the oldest entry lives in, and empty, are recycled.
        let oldest = self.entries.front().map(|e| e.chunk);
        while self.chunks.len() > 1 {
            let front_no = self.chunk_base;
            if oldest.is_some_and(|o| o <= front_no) || self.chunks[0].live > 0 {
                break;
            }
            if let Some(c) = self.chunks.pop_front() {
                self.chunk_base += 1;
                if c.buf.capacity() == CHUNK && self.spare.len() < 4 {
                    self.spare.push(c.buf);
                }
            }
        }
        n
    }

    /// The lsn of the oldest live message (what the spool must keep), if any.
    pub fn oldest_lsn(&self) -> Option<u64> {
        self.entries.iter().find(|e| e.live).map(|e| e.lsn)
    }

    /// The id of the first live message that arrived at or after `t` (UTC ns), or the
    /// next id when none did: a binary search over arrival times, which rise with ids
    /// (one router's clock is monotonic; only a wall clock set back across a restart
    /// breaks the order, and then the search lands at one of the places where it does).
    /// Not a walk from the oldest, which a BIND by time over a million retained
    /// messages made cost ~5 ms per frame.
    pub fn first_id_since(&self, t: u64) -> u64 {
        let at = self.entries.partition_point(|e| e.time < t);
        self.entries
            .range(at..)
            .find(|e| e.live)
            .map_or(self.next_id(), |e| e.id)
    }

    /// Ids of retained live messages, from `from`, in order.
    pub fn ids_from(&self, from: u64) -> impl Iterator<Item = &Entry> {
        let skip = from.saturating_sub(self.first_id) as usize;
        self.entries.iter().skip(skip).filter(|e| e.live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: u64, payload: &[u8]) -> NewMessage<'_> {
        NewMessage {
            id,
            lsn: id,
            time: id * 10,
            seq: id,
            stamps: None,
            topic: b"t",
            payload,
        }
    }

    #[test]
    fn stores_reads_and_releases_in_order() {
        let mut s = Store::new(1);
        let big = vec![7u8; 700_000];
        for id in 1..=5 {
            s.push(&msg(id, &big));
        }
        assert_eq!(s.next_id(), 6);
        let e = *s.entry(3).unwrap();
        assert_eq!(s.bytes_of(&e), (&b"t"[..], &big[..]));
        s.entry_mut(2).unwrap().refs = 1;
        // Retention says nothing need stay: 1 goes, 2 is held by a queue.
        assert_eq!(s.release_front(|_, _| false), 1);
        assert_eq!(s.first_id(), 2);
        s.entry_mut(2).unwrap().refs = 0;
        assert_eq!(s.release_front(|_, _| false), 4);
        assert_eq!(s.len(), 0);
        assert_eq!(s.bytes(), 0);
        // Ids go on where they were.
        s.push(&msg(6, b"x"));
        assert_eq!(s.entry(6).unwrap().id, 6);
    }

    #[test]
    fn the_first_message_since_a_time_is_found_by_arrival_time() {
        let mut s = Store::new(1);
        for id in 1..=100 {
            s.push(&msg(id, b"x")); // arrives at id * 10
        }
        assert_eq!(s.first_id_since(0), 1);
        assert_eq!(s.first_id_since(10), 1);
        assert_eq!(s.first_id_since(11), 2);
        assert_eq!(s.first_id_since(500), 50);
        assert_eq!(s.first_id_since(1000), 100);
        assert_eq!(s.first_id_since(1001), 101, "none since: the next id");
        // A dead message is passed over; released ones are no longer there.
        s.kill(50);
        assert_eq!(s.first_id_since(495), 51);
        assert_eq!(s.release_front(|e, _| e.id > 50), 50);
        assert_eq!(s.first_id_since(0), 51);
        // The same answers as a walk from the oldest.
        for t in (0..1100).step_by(7) {
            let walk = s
                .ids_from(0)
                .find(|e| e.time >= t)
                .map_or(s.next_id(), |e| e.id);
            assert_eq!(s.first_id_since(t), walk, "t = {t}");
        }
    }

    #[test]
    fn gaps_in_ids_become_dead_entries() {
        let mut s = Store::new(1);
        s.push(&msg(1, b"a"));
        s.push(&msg(4, b"b"));
        assert!(!s.entry(2).unwrap().live);
        assert!(s.entry(4).unwrap().live);
        assert_eq!(s.ids_from(0).map(|e| e.id).collect::<Vec<_>>(), vec![1, 4]);
        s.kill(4);
        assert_eq!(s.ids_from(0).map(|e| e.id).collect::<Vec<_>>(), vec![1]);
    }
}
