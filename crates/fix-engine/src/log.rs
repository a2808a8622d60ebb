//! The optional message log (`FileLogPath`), written off the engine thread.
//!
//! # Design
//!
//! The engine thread appends each logged item (a received or sent message, or an
//! event text) as a small binary record to a per-turn batch buffer: a `memcpy`, no
//! allocation once the buffer has grown, no syscall, no lock. Once per loop turn the
//! batch is handed to a writer thread through a bounded channel and an empty buffer
//! is taken back from a pool the writer refills; the writer formats the lines and
//! writes them to the files. If the writer falls behind and the channel is full, the
//! batch is dropped and counted ([`MessageLog::dropped`]) rather than blocking the
//! engine: the log is a diagnostic, the store is the record.
//!
//! **Bounds.** Batches in flight are bounded in number ([`QUEUE`]) and in bytes
//! ([`MAX_IN_FLIGHT`]: a batch that would pass it is dropped and counted the same way),
//! and a buffer emptied with more than [`KEEP`] bytes of capacity is given back: a
//! hostile-input probe's peer sending 4 MB orders while the log lagged (a slow disk)
//! left 518 MB resident for good (a turn's batch held many of them, and every buffer
//! kept the capacity it once grew to).
//!
//! # Files
//!
//! As QuickFIX's `FileLog`, per session under its `FileLogPath`:
//! `<BeginString>-<SenderCompID>-<TargetCompID>[-<Qualifier>].messages.current.log`
//! (every message received and sent, raw, SOH kept) and `...event.current.log`
//! (session events), each line `YYYYMMDD-HH:MM:SS.nnnnnnnnn : <text>`. Files are
//! appended to across restarts.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;

use tickwire_fix::codec::{write_utc_timestamp, TimestampPrecision};

/// Batches in flight between the engine and the writer.
const QUEUE: usize = 64;
/// Bytes in flight between the engine and the writer (batches handed over, not yet
/// written) at most: beyond, the batch is dropped and counted.
pub(crate) const MAX_IN_FLIGHT: usize = 64 << 20;
/// Capacity an emptied buffer may keep (larger ones are shrunk to it).
pub(crate) const KEEP: usize = 1 << 20;
/// Record kinds.
const KIND_IN: u8 = 1;
const KIND_OUT: u8 = 2;
const KIND_EVENT: u8 = 3;
/// kind u8, session u32, time u64, len u32.
const HEAD: usize = 17;

/// The engine side of the message log. See the module docs.
pub struct MessageLog {
    batch: Vec<u8>,
    /// Bytes handed to the writer and not yet written (the writer takes them off).
    in_flight: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    tx: Option<SyncSender<Vec<u8>>>,
    pool: Receiver<Vec<u8>>,
    dropped: u64,
    thread: Option<JoinHandle<()>>,
}

/// Where one session's log lines go (None: the session is not logged).
pub(crate) type LogTargets = Vec<Option<(PathBuf, String)>>;

impl MessageLog {
    /// Starts the writer thread. `targets[i]` is session i's `(FileLogPath, file
    /// prefix)`, None for sessions without a log.
    pub(crate) fn start(targets: LogTargets) -> std::io::Result<MessageLog> {
        let mut files: Vec<Option<(BufWriter<File>, BufWriter<File>)>> = Vec::new();
        for t in targets {
            files.push(match t {
                Some((dir, prefix)) => {
                    std::fs::create_dir_all(&dir)?;
                    // A regular file only: a FIFO there hung the start (hostile-input
                    // probe); the error names the file.
                    let open = |name: String| -> std::io::Result<BufWriter<File>> {
                        let path = dir.join(name);
                        let mut o = OpenOptions::new();
                        o.create(true).append(true);
                        let f = tickwire_rt::files::open_regular(&o, &path).map_err(|e| {
                            std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
                        })?;
                        Ok(BufWriter::new(f))
                    };
                    Some((
                        open(format!("{prefix}.messages.current.log"))?,
                        open(format!("{prefix}.event.current.log"))?,
                    ))
                }
                None => None,
            });
        }
        Self::spawn(move |rx, pool_tx, in_flight| writer(rx, pool_tx, in_flight, files))
    }

    /// Starts `sink` on the writer thread: it receives the batches and hands emptied
    /// buffers back to the pool. [`MessageLog::start`]'s sink writes the files; tests
    /// pass one that blocks.
    fn spawn(
        sink: impl FnOnce(Receiver<Vec<u8>>, SyncSender<Vec<u8>>, InFlight) + Send + 'static,
    ) -> std::io::Result<MessageLog> {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(QUEUE);
        let (pool_tx, pool) = mpsc::sync_channel::<Vec<u8>>(QUEUE);
        let in_flight = InFlight::default();
        let writer_in_flight = in_flight.clone();
        let thread = std::thread::Builder::new()
            .name("fix-log".into())
            .spawn(move || sink(rx, pool_tx, writer_in_flight))?;
        Ok(MessageLog {
            batch: Vec::with_capacity(64 * 1024),
            in_flight,
            tx: Some(tx),
            pool,
            dropped: 0,
            thread: Some(thread),
        })
    }

    fn push(&mut self, kind: u8, session: usize, now: u64, bytes: &[u8]) {
        let Ok(len) = u32::try_from(bytes.len()) else {
            return;
        };
        self.batch.push(kind);
        self.batch
            .extend_from_slice(&(session as u32).to_le_bytes());
        self.batch.extend_from_slice(&now.to_le_bytes());
        self.batch.extend_from_slice(&len.to_le_bytes());
        self.batch.extend_from_slice(bytes);
    }

    /// A message received on `session`.
    pub(crate) fn incoming(&mut self, session: usize, now: u64, msg: &[u8]) {
        self.push(KIND_IN, session, now, msg);
    }

    /// A message sent on `session`.
    pub(crate) fn outgoing(&mut self, session: usize, now: u64, msg: &[u8]) {
        self.push(KIND_OUT, session, now, msg);
    }

    /// An event of `session`.
    pub(crate) fn event(&mut self, session: usize, now: u64, text: &str) {
        self.push(KIND_EVENT, session, now, text.as_bytes());
    }

    /// Hands this turn's batch to the writer (called once per loop turn).
    pub(crate) fn end_turn(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let Some(tx) = &self.tx else { return };
        let len = self.batch.len();
        let in_flight = self.in_flight.load(Ordering::Acquire);
        // One batch alone may pass the bound (a turn of big messages with nothing in
        // flight is written, not dropped for its size).
        if in_flight > 0 && in_flight.saturating_add(len) > MAX_IN_FLIGHT {
            self.dropped += 1;
            self.batch.clear();
            shrink(&mut self.batch);
            return;
        }
        let next = self.pool.try_recv().unwrap_or_default();
        let batch = std::mem::replace(&mut self.batch, next);
        self.in_flight.fetch_add(len, Ordering::AcqRel);
        match tx.try_send(batch) {
            Ok(()) => {}
            Err(TrySendError::Full(mut b)) | Err(TrySendError::Disconnected(mut b)) => {
                self.in_flight.fetch_sub(len, Ordering::AcqRel);
                self.dropped += 1;
                b.clear();
                shrink(&mut b);
                // Keep the larger buffer.
                if b.capacity() > self.batch.capacity() {
                    self.batch = b;
                }
            }
        }
    }

    /// Batches dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Hands over what is pending and waits for the writer to write everything.
    pub(crate) fn close(&mut self) {
        self.end_turn();
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MessageLog {
    fn drop(&mut self) {
        self.close();
    }
}

type Files = Vec<Option<(BufWriter<File>, BufWriter<File>)>>;

/// Bytes handed to the writer and not yet written.
type InFlight = std::sync::Arc<std::sync::atomic::AtomicUsize>;

/// An emptied buffer keeps at most [`KEEP`] bytes of capacity.
fn shrink(b: &mut Vec<u8>) {
    if b.capacity() > KEEP {
        b.shrink_to(KEEP);
    }
}

fn writer(rx: Receiver<Vec<u8>>, pool: SyncSender<Vec<u8>>, in_flight: InFlight, mut files: Files) {
    let mut line = Vec::with_capacity(1024);
    while let Ok(mut batch) = rx.recv() {
        let mut pos = 0;
        while let Some(head) = batch.get(pos..pos + HEAD) {
            let kind = head[0];
            let session = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut t = [0u8; 8];
            t.copy_from_slice(&head[5..13]);
            let now = u64::from_le_bytes(t);
            let len = u32::from_le_bytes([head[13], head[14], head[15], head[16]]) as usize;
            let Some(body) = batch.get(pos + HEAD..pos + HEAD + len) else {
                break;
            };
            pos += HEAD + len;
            let Some(Some((msgs, events))) = files.get_mut(session) else {
                continue;
            };
            line.clear();
            write_utc_timestamp(&mut line, now, TimestampPrecision::Nanos);
            line.extend_from_slice(b" : ");
            line.extend_from_slice(body);
            line.push(b'\n');
            let out = if kind == KIND_EVENT { events } else { msgs };
            // A failing log file must not stop the engine: errors are ignored.
            let _ = out.write_all(&line);
        }
        for (m, e) in files.iter_mut().flatten() {
            let _ = m.flush();
            let _ = e.flush();
        }
        in_flight.fetch_sub(batch.len(), Ordering::AcqRel);
        batch.clear();
        shrink(&mut batch);
        let _ = pool.try_send(batch);
    }
    for (m, e) in files.iter_mut().flatten() {
        let _ = m.flush();
        let _ = e.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record times in one batch, in order.
    fn times(batch: &[u8]) -> Vec<u64> {
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some(head) = batch.get(pos..pos + HEAD) {
            let mut t = [0u8; 8];
            t.copy_from_slice(&head[5..13]);
            out.push(u64::from_le_bytes(t));
            let len = u32::from_le_bytes([head[13], head[14], head[15], head[16]]) as usize;
            pos += HEAD + len;
        }
        out
    }

    /// Hostile-input probe: 4 MB orders while the log lagged left 518 MB resident.
    /// Batches in flight are bounded in bytes too (the ones past it dropped and
    /// counted), and a buffer the engine keeps after a drop is shrunk to `KEEP`.
    #[test]
    fn batches_in_flight_are_bounded_in_bytes_and_big_buffers_shrink() {
        let (open_gate, gate) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel::<usize>();
        let mut log = MessageLog::spawn(move |rx, pool, in_flight| {
            let _ = gate.recv();
            let mut n = 0;
            while let Ok(mut batch) = rx.recv() {
                in_flight.fetch_sub(batch.len(), Ordering::AcqRel);
                n += 1;
                batch.clear();
                let _ = pool.try_send(batch);
            }
            let _ = done.send(n);
        })
        .expect("spawning the writer thread");
        // Declared after `log`, dropped before it: a failed assert below lets the
        // writer go instead of hanging the test in `close`.
        let open_gate = open_gate;
        let order = vec![b'x'; 4 << 20];
        let per_batch = order.len() + HEAD;
        let fit = MAX_IN_FLIGHT / per_batch;
        for t in 0..20u64 {
            log.incoming(0, t, &order);
            log.end_turn();
            assert!(log.batch.capacity() <= KEEP, "{}", log.batch.capacity());
        }
        assert_eq!(log.dropped(), 20 - fit as u64, "{fit} batches fit");
        assert!(log.in_flight.load(Ordering::Acquire) <= MAX_IN_FLIGHT);
        assert!(log.batch.capacity() <= KEEP, "{}", log.batch.capacity());
        open_gate.send(()).unwrap();
        log.close();
        assert_eq!(finished.recv().unwrap(), fit);
        let mut big = Vec::with_capacity(8 << 20);
        shrink(&mut big);
        assert!(big.capacity() <= KEEP);
    }

    /// A writer stuck (here: on a gate the test opens later) must cost the engine
    /// nothing but dropped batches: `end_turn` never waits for it, every batch beyond
    /// the channel's capacity is dropped and counted, and a dropped batch leaves
    /// nothing behind in the next one. No timing: had `end_turn` blocked on the full
    /// channel, the test thread would never reach the line that opens the gate.
    #[test]
    fn a_stuck_writer_makes_the_engine_drop_and_count_batches_not_wait() {
        let (open_gate, gate) = mpsc::channel::<()>();
        let (report, reports) = mpsc::channel::<Vec<u64>>();
        let mut log = MessageLog::spawn(move |rx, pool, _| {
            let _ = gate.recv();
            while let Ok(mut batch) = rx.recv() {
                let _ = report.send(times(&batch));
                batch.clear();
                let _ = pool.try_send(batch);
            }
        })
        .expect("spawning the writer thread");

        const EXTRA: u64 = 10;
        for t in 0..QUEUE as u64 + EXTRA {
            log.event(0, t, "event");
            log.incoming(1, t, b"8=FIX.4.4\x01");
            log.end_turn();
        }
        // The channel held QUEUE batches; every later one was dropped.
        assert_eq!(log.dropped(), EXTRA);
        // An empty turn hands nothing over and drops nothing.
        log.end_turn();
        assert_eq!(log.dropped(), EXTRA);

        open_gate
            .send(())
            .expect("the writer is waiting on the gate");
        let kept: Vec<Vec<u64>> = (0..QUEUE)
            .map(|_| reports.recv().expect("a batch"))
            .collect();
        let expected: Vec<Vec<u64>> = (0..QUEUE as u64).map(|t| vec![t, t]).collect();
        assert_eq!(
            kept, expected,
            "the first QUEUE batches arrive whole and in order"
        );

        // The writer has caught up: the next batch goes through, and holds only its own
        // records (nothing of the dropped batches).
        log.event(0, 1_000, "after");
        log.close();
        assert_eq!(reports.recv().expect("the last batch"), vec![1_000]);
        assert!(reports.recv().is_err(), "nothing else was written");
        assert_eq!(log.dropped(), EXTRA);
    }
}
