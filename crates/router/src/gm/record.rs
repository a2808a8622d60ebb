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
            out.push(b'M');
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
    }
}

struct R<'a>(&'a [u8]);

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
            let id = r.u64()?;
            let time = r.u64()?;
            let seq = r.u64()?;
            let send = r.u64()?;
            let rin = r.u64()?;
            let has = r.take(1)?[0];
            let identity = r.name()?;
            let tl = r.take(2)?;
            let tl = u16::from_le_bytes([tl[0], tl[1]]) as usize;
            let topic = r.take(tl)?;
            Record::Message {
                id,
                time,
                seq,
                stamps: (has != 0).then_some((send, rin)),
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
        ];
        let mut b = Vec::new();
        for r in recs {
            encode(&mut b, &r);
            assert_eq!(decode(&b), Ok(r));
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&b);
        }
    }
}
