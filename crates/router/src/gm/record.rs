//! Spool records: what the router writes to the durable log, and reads back at start.
//! Little endian; the spool adds length, checksum and record number around each.
//!
//! | kind | body |
//! |---|---|
//! | `M` message | id u64, time u64, seq u64, send u64, router_in u64, has_stamps u8, identity (u8 len + bytes), topic (u16 len + bytes), payload (rest) |
//! | `A` acknowledged (removed from a queue) | id u64, queue (u8 len + bytes) |
//! | `D` dead-lettered | id u64, from queue, to queue |
//! | `P` purged | up_to u64, queue |
//! | `Q` queue defined | the queue definition as JSON (rest) |
//! | `X` queue deleted | queue |
//! | `S` publisher checkpoint | hwm u64, identity |
//! | `F` publisher identity forgotten (its sequence numbers start again) | identity |
//! | `R` relocated message (a copy of a held message, so the segment of its original can go) | id u64, time u64, seq u64, send u64, router_in u64, has_stamps u8, next_id u64 (the store's next id when written), holders u16, per holder: first_message_id u64 + queue (u8 len + bytes), topic (u16 len + bytes), payload (rest) |
//!
//! An `R` record says: "at this point of the log, message `id` is held by exactly these
//! queue instances (a queue instance is its name and its `first_message_id`)". Recovery
//! gives it to them, and to the queues made after it (`first_message_id` at or above
//! `next_id`) whose definition and patterns take it, as for an `M` record; to no other.
//! A message already recovered (its original record, or an earlier copy, is still in the
//! spool, so every record after it is too) is left as recovered: the copy adds nothing.

/// One decoded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    Message {
        id: u64,
        time: u64,
        seq: u64,
        stamps: Option<(u64, u64)>,
        identity: &'a str,
        topic: &'a [u8],
        payload: &'a [u8],
    },
    Acked {
        id: u64,
        queue: &'a str,
    },
    DeadLettered {
        id: u64,
        from: &'a str,
        to: &'a str,
    },
    Purged {
        up_to: u64,
        queue: &'a str,
    },
    QueueDefined {
        json: &'a str,
    },
    QueueDeleted {
        queue: &'a str,
    },
    Publisher {
        hwm: u64,
        identity: &'a str,
    },
    /// The router forgot this identity (to make room for another): at recovery, what
    /// the records before this one stored under it no longer counts.
    Forgotten {
        identity: &'a str,
    },
    /// The id the next message takes: a checkpoint's first record, so that ids go on
    /// from there after a restart when the records of the messages before it have
    /// been reclaimed (nothing retained), and are never given out twice.
    NextId {
        id: u64,
    },
    /// A held message written again (relocated), with the queues holding it.
    Relocated {
        id: u64,
        time: u64,
        seq: u64,
        stamps: Option<(u64, u64)>,
        /// The store's next message id when the copy was written: queues with a
        /// `first_message_id` at or above it were made after the copy.
        next_id: u64,
        holders: Holders<'a>,
        topic: &'a [u8],
        payload: &'a [u8],
    },
}

/// The queue instances an `R` record names: (first_message_id, name) each, encoded
/// (checked when decoded, so iterating cannot fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holders<'a> {
    n: u16,
    bytes: &'a [u8],
}

impl<'a> Holders<'a> {
    /// How many.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// None.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Each holder: its `first_message_id` and its name.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &'a str)> {
        let mut r = R(self.bytes);
        (0..self.n).map_while(move |_| Some((r.u64().ok()?, r.name().ok()?)))
    }
}

/// Builds the holder list of an `R` record.
#[derive(Debug, Default)]
pub struct HoldersBuf {
    n: u16,
    bytes: Vec<u8>,
}

impl HoldersBuf {
    /// Empties it.
    pub fn clear(&mut self) {
        self.n = 0;
        self.bytes.clear();
    }

    /// Adds a queue instance; false (nothing added) when the list is full.
    pub fn push(&mut self, first_message_id: u64, queue: &str) -> bool {
        if self.n == u16::MAX {
            return false;
        }
        self.n += 1;
        self.bytes
            .extend_from_slice(&first_message_id.to_le_bytes());
        name(&mut self.bytes, queue);
        true
    }

    /// Encoded size.
    pub fn encoded_len(&self) -> usize {
        2 + self.bytes.len()
    }

    /// The list, for a [`Record::Relocated`].
    pub fn holders(&self) -> Holders<'_> {
        Holders {
            n: self.n,
            bytes: &self.bytes,
        }
    }
}

/// A record that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("undecodable spool record: {0}")]
pub struct BadRecord(pub &'static str);

fn name(out: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(255)];
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

/// The kind byte and the fields an `M` and an `R` record share: id, time, sequence,
/// both stamps (0 when absent) and whether they are present.
fn message_head(
    out: &mut Vec<u8>,
    kind: u8,
    id: u64,
    time: u64,
    seq: u64,
    stamps: Option<(u64, u64)>,
) {
    out.push(kind);
    for v in [
        id,
        time,
        seq,
        stamps.map_or(0, |s| s.0),
        stamps.map_or(0, |s| s.1),
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.push(u8::from(stamps.is_some()));
}

/// Encodes a record into `out` (cleared first).
pub fn encode(out: &mut Vec<u8>, r: &Record<'_>) {
    out.clear();
    match *r {
        Record::Message {
            id,
            time,
            seq,
            stamps,
            identity,
            topic,
            payload,
        } => {
            message_head(out, b'M', id, time, seq, stamps);
            name(out, identity);
            out.extend_from_slice(&(topic.len() as u16).to_le_bytes());
            out.extend_from_slice(topic);
            out.extend_from_slice(payload);
        }
        Record::Acked { id, queue } => {
            out.push(b'A');
            out.extend_from_slice(&id.to_le_bytes());
            name(out, queue);
        }
        Record::DeadLettered { id, from, to } => {
            out.push(b'D');
            out.extend_from_slice(&id.to_le_bytes());
            name(out, from);
            name(out, to);
        }
        Record::Purged { up_to, queue } => {
            out.push(b'P');
            out.extend_from_slice(&up_to.to_le_bytes());
            name(out, queue);
        }
        Record::QueueDefined { json } => {
            out.push(b'Q');
            out.extend_from_slice(json.as_bytes());
        }
        Record::QueueDeleted { queue } => {
            out.push(b'X');
            name(out, queue);
        }
        Record::Publisher { hwm, identity } => {
            out.push(b'S');
            out.extend_from_slice(&hwm.to_le_bytes());
            name(out, identity);
        }
        Record::Forgotten { identity } => {
            out.push(b'F');
            name(out, identity);
        }
        Record::NextId { id } => {
            out.push(b'N');
            out.extend_from_slice(&id.to_le_bytes());
        }
        Record::Relocated {
            id,
            time,
            seq,
            stamps,
            next_id,
            holders,
            topic,
            payload,
        } => {
            message_head(out, b'R', id, time, seq, stamps);
            out.extend_from_slice(&next_id.to_le_bytes());
            out.extend_from_slice(&holders.n.to_le_bytes());
            out.extend_from_slice(holders.bytes);
            out.extend_from_slice(&(topic.len() as u16).to_le_bytes());
            out.extend_from_slice(topic);
            out.extend_from_slice(payload);
        }
    }
}

struct R<'a>(&'a [u8]);

/// An `M` or `R` record's common fields: id, time, sequence, stamps.
type MessageHead = (u64, u64, u64, Option<(u64, u64)>);

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadRecord> {
        if self.0.len() < n {
            return Err(BadRecord("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u64(&mut self) -> Result<u64, BadRecord> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(
            b.try_into().map_err(|_| BadRecord("truncated"))?,
        ))
    }
    fn name(&mut self) -> Result<&'a str, BadRecord> {
        let n = self.take(1)?[0] as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| BadRecord("name is not UTF-8"))
    }
    fn u16(&mut self) -> Result<u16, BadRecord> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    /// What [`message_head`] wrote: id, time, sequence and the stamps (when flagged).
    fn message_head(&mut self) -> Result<MessageHead, BadRecord> {
        let (id, time, seq) = (self.u64()?, self.u64()?, self.u64()?);
        let (send, router_in) = (self.u64()?, self.u64()?);
        let has = self.take(1)?[0];
        Ok((id, time, seq, (has != 0).then_some((send, router_in))))
    }
    fn end(&self) -> Result<(), BadRecord> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(BadRecord("trailing bytes"))
        }
    }
}

/// Decodes a record.
pub fn decode(b: &[u8]) -> Result<Record<'_>, BadRecord> {
    let (&kind, rest) = b.split_first().ok_or(BadRecord("empty"))?;
    let mut r = R(rest);
    let rec = match kind {
        b'M' => {
            let (id, time, seq, stamps) = r.message_head()?;
            let identity = r.name()?;
            let tl = r.take(2)?;
            let tl = u16::from_le_bytes([tl[0], tl[1]]) as usize;
            let topic = r.take(tl)?;
            Record::Message {
                id,
                time,
                seq,
                stamps,
                identity,
                topic,
                payload: r.0,
            }
        }
        b'A' => {
            let id = r.u64()?;
            let queue = r.name()?;
            r.end()?;
            Record::Acked { id, queue }
        }
        b'D' => {
            let id = r.u64()?;
            let from = r.name()?;
            let to = r.name()?;
            r.end()?;
            Record::DeadLettered { id, from, to }
        }
        b'P' => {
            let up_to = r.u64()?;
            let queue = r.name()?;
            r.end()?;
            Record::Purged { up_to, queue }
        }
        b'Q' => Record::QueueDefined {
            json: std::str::from_utf8(r.0).map_err(|_| BadRecord("queue JSON is not UTF-8"))?,
        },
        b'X' => {
            let queue = r.name()?;
            r.end()?;
            Record::QueueDeleted { queue }
        }
        b'S' => {
            let hwm = r.u64()?;
            let identity = r.name()?;
            r.end()?;
            Record::Publisher { hwm, identity }
        }
        b'F' => {
            let identity = r.name()?;
            r.end()?;
            Record::Forgotten { identity }
        }
        b'N' => {
            let id = r.u64()?;
            r.end()?;
            Record::NextId { id }
        }
        b'R' => {
            let (id, time, seq, stamps) = r.message_head()?;
            let next_id = r.u64()?;
            let n = r.u16()?;
            let start = r.0;
            for _ in 0..n {
                r.u64()?;
                r.name()?;
            }
            let holders = Holders {
                n,
                bytes: &start[..start.len() - r.0.len()],
            };
            let tl = r.u16()? as usize;
            let topic = r.take(tl)?;
            Record::Relocated {
                id,
                time,
                seq,
                stamps,
                next_id,
                holders,
                topic,
                payload: r.0,
            }
        }
        _ => return Err(BadRecord("unknown record kind")),
    };
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_kind_round_trips() {
        let recs = [
            Record::Message {
                id: 1,
                time: 2,
                seq: 3,
                stamps: Some((4, 5)),
                identity: "p",
                topic: b"a/b",
                payload: b"xyz",
            },
            Record::Message {
                id: 1,
                time: 2,
                seq: 3,
                stamps: None,
                identity: "",
                topic: b"a",
                payload: b"",
            },
            Record::Acked { id: 9, queue: "q" },
            Record::DeadLettered {
                id: 9,
                from: "q",
                to: "dlq",
            },
            Record::Purged {
                up_to: 7,
                queue: "q",
            },
            Record::QueueDefined { json: "{}" },
            Record::QueueDeleted { queue: "q" },
            Record::Publisher {
                hwm: 11,
                identity: "p",
            },
            Record::Forgotten { identity: "p" },
            Record::NextId { id: 1 << 40 },
        ];
        let mut b = Vec::new();
        for r in recs {
            encode(&mut b, &r);
            assert_eq!(decode(&b), Ok(r));
        }
    }

    fn relocated<'a>(holders: &'a HoldersBuf, payload: &'a [u8]) -> Record<'a> {
        Record::Relocated {
            id: 5,
            time: 6,
            seq: 7,
            stamps: Some((8, 9)),
            next_id: 1_000,
            holders: holders.holders(),
            topic: b"a/b",
            payload,
        }
    }

    #[test]
    fn a_relocated_record_round_trips_with_its_holders() {
        let mut h = HoldersBuf::default();
        assert!(h.push(1, "q"));
        assert!(h.push(42, "dead-letters"));
        let r = relocated(&h, b"xyz");
        let mut b = Vec::new();
        encode(&mut b, &r);
        assert_eq!(b[0], b'R');
        let back = decode(&b).unwrap();
        assert_eq!(back, r);
        let Record::Relocated { holders, .. } = back else {
            panic!("{back:?}")
        };
        assert_eq!(
            holders.iter().collect::<Vec<_>>(),
            vec![(1, "q"), (42, "dead-letters")]
        );
        assert_eq!(holders.len(), 2);
        // No holder, no stamps, empty payload.
        let none = HoldersBuf::default();
        let r = Record::Relocated {
            id: 1,
            time: 0,
            seq: 0,
            stamps: None,
            next_id: 2,
            holders: none.holders(),
            topic: b"t",
            payload: b"",
        };
        encode(&mut b, &r);
        assert_eq!(decode(&b), Ok(r));
        assert_eq!(none.encoded_len(), 2);
    }

    /// Every cut of an `R` record short of its payload is damage, not a panic; so is a
    /// holder name that is not UTF-8 or a holder count larger than the list.
    #[test]
    fn a_truncated_or_garbled_relocated_record_is_reported_damaged() {
        let mut h = HoldersBuf::default();
        h.push(1, "q1");
        h.push(2, "q2");
        let mut b = Vec::new();
        encode(&mut b, &relocated(&h, b"payload"));
        let payload_at = b.len() - b"payload".len();
        for cut in 0..payload_at {
            assert!(decode(&b[..cut]).is_err(), "cut at {cut} decoded");
        }
        // The count says 3 holders: the third eats the topic length and fails.
        let count_at = 1 + 5 * 8 + 1 + 8;
        let mut more = b.clone();
        more[count_at] = 3;
        assert!(decode(&more).is_err());
        // A holder name that is not UTF-8.
        let mut bad = b.clone();
        let first_name = count_at + 2 + 8 + 1;
        bad[first_name] = 0xff;
        assert_eq!(decode(&bad), Err(BadRecord("name is not UTF-8")));
        // Garbled anywhere: never a panic.
        for i in 0..b.len() {
            for v in [0u8, 0x7f, 0xff] {
                let mut g = b.clone();
                g[i] = v;
                let _ = decode(&g);
            }
        }
    }

    proptest! {
        #[test]
        fn a_relocated_record_decodes_whatever_follows_its_kind(
            b in proptest::collection::vec(any::<u8>(), 0..200)
        ) {
            let mut r = vec![b'R'];
            r.extend_from_slice(&b);
            if let Ok(rec) = decode(&r) {
                let mut again = Vec::new();
                encode(&mut again, &rec);
                prop_assert_eq!(decode(&again), Ok(rec));
            }
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&b);
        }
    }
}
