//! Message store tests: memory and file stores, recovery, corruption, and a real
//! `kill -9` crash test (the test binary re-executes itself in a child mode).

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tickwire_fix::store::{
    FileStore, MemoryStore, MessageStore, OnLostLog, StoreError, SyncPolicy, SEQNUMS_EVERY,
};

/// A path unique to this test, not yet created (the store creates it), inside a fresh
/// temporary directory (`tickwire-store-test-NAME-*`) that the returned guard removes
/// when it drops, pass or fail. Bind the guard to a name (`_tmp`, not `_`, which would
/// drop it at once) that lives until the test ends.
fn test_dir(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("tickwire-store-test-{name}-"))
        .tempdir()
        .unwrap();
    let dir = tmp.path().join("store");
    (tmp, dir)
}

fn msg(seq: u64) -> Vec<u8> {
    format!("8=FIX.4.4\x019=5\x0135=D\x0134={seq}\x0111=order-{seq}\x0110=000\x01").into_bytes()
}

fn collect(store: &dyn MessageStore, begin: u64, end: u64) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    store
        .get_range(begin, end, &mut |s, m| {
            out.push((s, m.to_vec()));
            std::ops::ControlFlow::Continue(())
        })
        .expect("get_range");
    out
}

/// Saves messages 1..=`n` as sent: each saved, then the sender sequence moved past it.
fn save_sent(s: &mut impl MessageStore, n: u64) {
    for seq in 1..=n {
        s.save(seq, &msg(seq)).unwrap();
        s.incr_next_sender_seq().unwrap();
    }
}

fn open(dir: &Path) -> FileStore {
    let (s, w) = FileStore::open(dir, SyncPolicy::Os, 42).expect("open");
    assert!(w.is_none(), "unexpected warning {w:?}");
    s
}

fn store_file(dir: &Path) -> PathBuf {
    dir.join("store.log")
}

#[test]
fn memory_store_round_trip_range_and_reset() {
    let mut s = MemoryStore::new(7);
    assert_eq!((s.next_sender_seq(), s.next_target_seq()), (1, 1));
    save_sent(&mut s, 5);
    s.incr_next_target_seq().unwrap();
    assert_eq!((s.next_sender_seq(), s.next_target_seq()), (6, 2));
    let got = collect(&s, 2, 4);
    assert_eq!(got, (2..=4).map(|q| (q, msg(q))).collect::<Vec<_>>());
    assert_eq!(collect(&s, 4, u64::MAX).len(), 2);
    // Overwrite an existing sequence number.
    s.save(3, b"again").unwrap();
    assert_eq!(collect(&s, 3, 3), vec![(3, b"again".to_vec())]);
    assert_eq!(s.creation_time(), 7);
    s.reset(99).unwrap();
    assert_eq!((s.next_sender_seq(), s.next_target_seq()), (1, 1));
    assert_eq!(s.creation_time(), 99);
    assert!(collect(&s, 1, u64::MAX).is_empty());
}

#[test]
fn file_store_round_trip_and_reopen_continues_sequences() {
    let (_tmp, dir) = test_dir("reopen");
    {
        let mut s = open(&dir);
        assert_eq!(s.creation_time(), 42);
        for seq in 1..=10 {
            s.save(seq, &msg(seq)).unwrap();
            s.incr_next_sender_seq().unwrap();
            if seq == 5 {
                s.flush().unwrap();
            }
        }
        // Unflushed records are readable too.
        assert_eq!(collect(&s, 1, u64::MAX).len(), 10);
        s.set_next_target_seq(17).unwrap();
        s.flush().unwrap();
    }
    let (s, w) = FileStore::open(&dir, SyncPolicy::EveryMessage, 1_000).unwrap();
    assert!(w.is_none());
    assert_eq!(s.next_sender_seq(), 11);
    assert_eq!(s.next_target_seq(), 17);
    assert_eq!(
        s.creation_time(),
        42,
        "creation time is persisted, not reset"
    );
    assert_eq!(
        collect(&s, 1, u64::MAX),
        (1..=10).map(|q| (q, msg(q))).collect::<Vec<_>>()
    );
    assert_eq!(
        collect(&s, 4, 6).iter().map(|m| m.0).collect::<Vec<_>>(),
        [4, 5, 6]
    );
}

#[test]
fn file_store_sender_seq_recovered_from_last_message() {
    let (_tmp, dir) = test_dir("lastmsg");
    {
        let mut s = open(&dir);
        // Saved but the sequence number was never incremented (crash in between).
        s.save(1, &msg(1)).unwrap();
        s.save(2, &msg(2)).unwrap();
        s.flush().unwrap();
    }
    let s = open(&dir);
    assert_eq!(s.next_sender_seq(), 3);
}

/// The target sequence number is recorded by the flush: one NextTarget record however
/// many messages a turn received, none when it did not move, and recovery finds the
/// last value flushed.
#[test]
fn file_store_target_seq_is_recorded_once_per_flush() {
    let (_tmp, dir) = test_dir("targetflush");
    let record = (8 + 9) as u64;
    // The log's length: the file is longer while the store's mapped window is open.
    let len = |s: &FileStore| s.log_len();
    {
        let mut s = open(&dir);
        s.flush().unwrap();
        let start = len(&s);
        for _ in 0..5 {
            s.incr_next_target_seq().unwrap();
        }
        assert_eq!(s.next_target_seq(), 6);
        s.flush().unwrap();
        assert_eq!(len(&s) - start, record, "one record for five increments");
        s.flush().unwrap();
        assert_eq!(len(&s) - start, record, "nothing new to record");
        // Moved and moved back within a turn: the log already says 6.
        s.set_next_target_seq(9).unwrap();
        s.set_next_target_seq(6).unwrap();
        s.flush().unwrap();
        assert_eq!(len(&s) - start, record);
        s.set_next_target_seq(9).unwrap();
        s.flush().unwrap();
        assert_eq!(len(&s) - start, 2 * record);
    }
    let mut s = open(&dir);
    assert_eq!(s.next_target_seq(), 9);
    // Not flushed: not in the log (as a message saved and never flushed).
    s.incr_next_target_seq().unwrap();
    drop(s);
    let s = open(&dir);
    assert_eq!(s.next_target_seq(), 9);
}

/// A sent message (save, then the increment past it) appends one record: the increment
/// adds no NextSender record, since recovery already takes one past the highest stored
/// MsgSeqNum. A sender sequence number the messages do not imply is still recorded and
/// recovered.
#[test]
fn file_store_sender_increment_after_save_adds_no_record() {
    let (_tmp, dir) = test_dir("onerecord");
    let record = |payload: usize| (8 + 9 + payload) as u64;
    let sizes: Vec<u64>;
    {
        let mut s = open(&dir);
        s.flush().unwrap();
        let start = s.log_len();
        save_sent(&mut s, 3);
        s.flush().unwrap();
        let after = s.log_len();
        let payloads: u64 = (1..=3).map(|q| record(msg(q).len())).sum();
        assert_eq!(after - start, payloads, "one record per sent message");
        assert_eq!(s.next_sender_seq(), 4);
        // Not implied by the messages: recorded.
        s.set_next_sender_seq(10).unwrap();
        s.flush().unwrap();
        let with_jump = s.log_len();
        assert_eq!(with_jump - after, record(0));
        // The message for 10 and the increment past it: one record again.
        s.save(10, &msg(10)).unwrap();
        s.incr_next_sender_seq().unwrap();
        s.flush().unwrap();
        sizes = vec![with_jump, s.log_len()];
        assert_eq!(sizes[1] - sizes[0], record(msg(10).len()));
    }
    {
        let mut s = open(&dir);
        assert_eq!(s.next_sender_seq(), 11);
        assert_eq!(collect(&s, 1, u64::MAX).len(), 4);
        // Past the last message: both the move and the increment after it are
        // recorded (no message implies them).
        s.set_next_sender_seq(12).unwrap();
        s.incr_next_sender_seq().unwrap();
        s.flush().unwrap();
        assert_eq!(s.next_sender_seq(), 13);
    }
    let s = open(&dir);
    assert_eq!(s.next_sender_seq(), 13);
}

#[test]
fn file_store_reset_drops_messages_and_persists() {
    let (_tmp, dir) = test_dir("reset");
    {
        let mut s = open(&dir);
        save_sent(&mut s, 3);
        s.set_next_target_seq(9).unwrap();
        s.flush().unwrap();
        s.reset(5_000).unwrap();
        assert_eq!((s.next_sender_seq(), s.next_target_seq()), (1, 1));
        assert!(collect(&s, 1, u64::MAX).is_empty());
        s.save(1, b"after reset").unwrap();
        s.incr_next_sender_seq().unwrap();
        s.flush().unwrap();
    }
    let s = open(&dir);
    assert_eq!(s.creation_time(), 5_000);
    assert_eq!((s.next_sender_seq(), s.next_target_seq()), (2, 1));
    assert_eq!(collect(&s, 1, u64::MAX), vec![(1, b"after reset".to_vec())]);
}

#[test]
fn file_store_session_directory_name() {
    assert_eq!(
        FileStore::session_dir_name("FIX.4.4", "BANZAI", "EXEC", None),
        "FIX.4.4-BANZAI-EXEC"
    );
    assert_eq!(
        FileStore::session_dir_name("FIXT.1.1", "A/B", "C", Some("q1")),
        "FIXT.1.1-A_B-C-q1"
    );
    let (_tmp, root) = test_dir("sessiondir");
    let (s, _) = FileStore::open_session(
        &root,
        "FIX.4.2",
        "S",
        "T",
        None,
        SyncPolicy::Os,
        1,
        OnLostLog::Refuse,
    )
    .unwrap();
    assert_eq!(s.dir(), root.join("FIX.4.2-S-T"));
    assert!(s.path().exists());
}

#[test]
fn file_store_corrupt_byte_in_middle_is_an_error() {
    let (_tmp, dir) = test_dir("corrupt");
    {
        let mut s = open(&dir);
        save_sent(&mut s, 5);
        s.flush().unwrap();
    }
    let path = store_file(&dir);
    let mut bytes = std::fs::read(&path).unwrap();
    // Flip a byte inside the third message body.
    let needle = b"order-3";
    let pos = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    bytes[pos] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();
    match FileStore::open(&dir, SyncPolicy::Os, 0) {
        Err(e @ StoreError::Corrupt { .. }) => {
            let text = e.to_string();
            assert!(text.contains("corrupt at offset"), "{text}");
            assert!(text.contains("checksum mismatch"), "{text}");
            assert!(text.contains("store.log"), "{text}");
        }
        other => panic!("expected corruption error, got {other:?}"),
    }
}

#[test]
fn file_store_damaged_length_in_middle_is_an_error_not_a_truncation() {
    let (_tmp, dir) = test_dir("badlen");
    let second;
    {
        let mut s = open(&dir);
        s.save(1, &msg(1)).unwrap();
        s.flush().unwrap();
        second = s.log_len() as usize;
        for seq in 2..=6 {
            s.save(seq, &msg(seq)).unwrap();
        }
        s.flush().unwrap();
    }
    let path = store_file(&dir);
    let mut bytes = std::fs::read(&path).unwrap();
    let before = bytes.len();
    // The length field of record 2 now points far past the end of the file.
    bytes[second + 3] = 0x7f;
    std::fs::write(&path, &bytes).unwrap();
    let err = FileStore::open(&dir, SyncPolicy::Os, 0).unwrap_err();
    assert!(
        matches!(err, StoreError::Corrupt { offset, .. } if offset == second as u64),
        "{err}"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().len() as usize,
        before,
        "nothing truncated"
    );
}

#[test]
fn file_store_torn_tail_is_truncated_with_warning() {
    let (_tmp, dir) = test_dir("torn");
    let full_len;
    let seqnums;
    {
        let mut s = open(&dir);
        save_sent(&mut s, 4);
        s.flush().unwrap();
        full_len = s.log_len();
        seqnums = std::fs::read(dir.join("store.seqnums")).unwrap();
        s.save(5, &msg(5)).unwrap();
        s.flush().unwrap();
    }
    // Cut the last record in half, as a partial write would. A crash in that write
    // comes before the flush's store.seqnums write: put back the one of the flush before.
    std::fs::write(dir.join("store.seqnums"), &seqnums).unwrap();
    let path = store_file(&dir);
    let now = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(full_len + (now - full_len) / 2).unwrap();
    drop(f);
    let (s, w) = FileStore::open(&dir, SyncPolicy::Os, 0).unwrap();
    let w = w.expect("a torn-tail warning");
    assert_eq!(w.truncated_at, full_len);
    assert!(w.to_string().contains("torn"));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), full_len);
    assert_eq!(s.next_sender_seq(), 5);
    assert_eq!(collect(&s, 1, u64::MAX).len(), 4);
    drop(s);
    // Zeros after the last record are the unwritten rest of the mapped window a crash
    // left allocated: the log ends there, no warning, and the zeros go.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(full_len + 100).unwrap();
    drop(f);
    let (s, w) = FileStore::open(&dir, SyncPolicy::Os, 0).unwrap();
    assert_eq!(w, None);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), full_len);
    assert_eq!(s.next_sender_seq(), 5);
    assert_eq!(collect(&s, 1, u64::MAX).len(), 4);
    drop(s);
    // A torn record followed by the window's zeros is still a torn final record.
    let mut bytes = std::fs::read(&path).unwrap();
    let mut tail = msg(5);
    tail.truncate(tail.len() / 2);
    let mut record = ((9 + msg(5).len()) as u32).to_le_bytes().to_vec();
    record.extend_from_slice(&[0xAB; 4]); // a checksum the half body cannot match
    record.push(2);
    record.extend_from_slice(&5u64.to_le_bytes());
    record.extend_from_slice(&tail);
    bytes.extend_from_slice(&record);
    bytes.resize(bytes.len() + 4096, 0);
    std::fs::write(&path, &bytes).unwrap();
    let (s, w) = FileStore::open(&dir, SyncPolicy::Os, 0).unwrap();
    let w = w.expect("a torn-tail warning");
    assert_eq!(w.truncated_at, full_len);
    assert_eq!(w.dropped_bytes, record.len() as u64 + 4096);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), full_len);
    assert_eq!(s.next_sender_seq(), 5);
}

#[test]
fn file_store_batched_policy_and_overwrite() {
    let (_tmp, dir) = test_dir("batched");
    {
        let (mut s, _) = FileStore::open(&dir, SyncPolicy::Batched { messages: 3 }, 0).unwrap();
        for seq in 1..=7 {
            s.save(seq, &msg(seq)).unwrap();
            s.incr_next_sender_seq().unwrap();
            s.flush().unwrap();
        }
        // A resent sequence number saved again replaces the old body.
        s.save(2, b"replacement").unwrap();
        s.sync().unwrap();
    }
    let s = open(&dir);
    assert_eq!(s.next_sender_seq(), 8);
    assert_eq!(collect(&s, 2, 2), vec![(2, b"replacement".to_vec())]);
    assert_eq!(collect(&s, 1, u64::MAX).len(), 7);
}

const CHILD_ENV: &str = "TICKWIRE_STORE_CRASH_CHILD_DIR";
const CHILD_MAX_ITERATIONS: u64 = 2_000_000;
const PARENT_WANTS: usize = 2_000;

/// Child mode: save + flush forever (bounded), printing each flushed sequence number.
fn crash_child(dir: &str) {
    use std::io::Write;
    let (mut s, _) = FileStore::open(Path::new(dir), SyncPolicy::Os, 1).expect("child open");
    let out = std::io::stdout();
    let mut out = out.lock();
    for _ in 0..CHILD_MAX_ITERATIONS {
        let seq = s.next_sender_seq();
        s.save(seq, &msg(seq)).expect("save");
        s.incr_next_sender_seq().expect("incr");
        s.flush().expect("flush");
        if writeln!(out, "SEQ {seq}")
            .and_then(|_| out.flush())
            .is_err()
        {
            break;
        }
    }
    std::process::exit(0);
}

#[test]
fn file_store_survives_kill_9() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        crash_child(&dir);
        return;
    }
    let (_tmp, dir) = test_dir("crash");
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "file_store_survives_kill_9",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().unwrap();
    let mut printed = Vec::with_capacity(PARENT_WANTS);
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(n) = line.strip_prefix("SEQ ") {
            printed.push(n.trim().parse::<u64>().unwrap());
            if printed.len() >= PARENT_WANTS {
                break;
            }
        }
    }
    child.kill().expect("kill -9 the child"); // SIGKILL on Unix
    let _ = child.wait();
    assert_eq!(
        printed.len(),
        PARENT_WANTS,
        "child printed too few sequence numbers"
    );
    let (s, _warning) = FileStore::open(&dir, SyncPolicy::Os, 0).expect("reopen after kill");
    let last = *printed.last().unwrap();
    assert!(
        s.next_sender_seq() > last,
        "{} <= {last}",
        s.next_sender_seq()
    );
    let mut stored = std::collections::HashMap::new();
    s.get_range(1, u64::MAX, &mut |q, m| {
        stored.insert(q, m.to_vec());
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    for seq in &printed {
        assert_eq!(
            stored.get(seq),
            Some(&msg(*seq)),
            "seq {seq} lost or damaged"
        );
    }
}

/// A store with five messages sent (next sender 6, next target 3), flushed.
fn store_with_five(dir: &Path) -> u64 {
    let mut s = open(dir);
    save_sent(&mut s, 5);
    s.incr_next_target_seq().unwrap();
    s.incr_next_target_seq().unwrap();
    s.flush().unwrap();
    std::fs::metadata(store_file(dir)).unwrap().len()
}

fn expect_lost(dir: &Path, what: &str) -> String {
    match FileStore::open(dir, SyncPolicy::Os, 0) {
        Err(e @ StoreError::Lost { .. }) => {
            let text = e.to_string();
            assert!(text.contains("store.log"), "{text}");
            assert!(text.contains("--reset-lost-store"), "{text}");
            text
        }
        other => panic!("{what}: expected StoreError::Lost, got {other:?}"),
    }
}

/// Issue 12 item 6: a 0-byte store.log silently restarted at sequence 1.
#[test]
fn regression_emptied_store_log_is_detected_not_restarted_at_one() {
    let (_tmp, dir) = test_dir("emptied");
    store_with_five(&dir);
    std::fs::write(store_file(&dir), b"").unwrap();
    let text = expect_lost(&dir, "emptied log");
    assert!(text.contains("empty") && text.contains("6/3"), "{text}");
    // Nothing was rewritten: the evidence stays.
    assert_eq!(std::fs::metadata(store_file(&dir)).unwrap().len(), 0);
}

/// Issue 12 item 6: a deleted store.log silently restarted at sequence 1.
#[test]
fn regression_deleted_store_log_is_detected_not_restarted_at_one() {
    let (_tmp, dir) = test_dir("deleted");
    store_with_five(&dir);
    std::fs::remove_file(store_file(&dir)).unwrap();
    let text = expect_lost(&dir, "deleted log");
    assert!(text.contains("missing"), "{text}");
    assert!(!store_file(&dir).exists(), "no fresh log written");
}

/// Issue 12 item 6: a clean truncation at a record boundary went undetected and the
/// next sender sequence number went back (reused numbers).
#[test]
fn regression_store_log_truncated_at_record_boundary_is_detected() {
    let (_tmp, dir) = test_dir("boundary");
    let three;
    {
        let mut s = open(&dir);
        save_sent(&mut s, 3);
        s.flush().unwrap();
        three = s.log_len();
        for seq in 4..=5 {
            s.save(seq, &msg(seq)).unwrap();
            s.incr_next_sender_seq().unwrap();
        }
        s.flush().unwrap();
    }
    // Before this fix, the truncated log opened cleanly at next sender 4.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(store_file(&dir))
        .unwrap();
    f.set_len(three).unwrap();
    drop(f);
    let text = expect_lost(&dir, "truncated log");
    assert!(text.contains("truncated") && text.contains("6/1"), "{text}");
}

/// An older copy of the log put back in place of the current one is detected.
#[test]
fn store_log_replaced_by_an_older_one_is_detected() {
    let (_tmp, dir) = test_dir("older");
    {
        let (mut s, _) = FileStore::open(&dir, SyncPolicy::Os, 10).unwrap();
        s.save(1, &msg(1)).unwrap();
        s.incr_next_sender_seq().unwrap();
        s.flush().unwrap();
    }
    let old = std::fs::read(store_file(&dir)).unwrap();
    {
        let (mut s, _) = FileStore::open(&dir, SyncPolicy::Os, 20).unwrap();
        s.reset(30).unwrap();
        s.flush().unwrap();
    }
    std::fs::write(store_file(&dir), &old).unwrap();
    let text = expect_lost(&dir, "older log");
    assert!(text.contains("before the one"), "{text}");
}

/// The explicit reset: OnLostLog::StartOver starts at 1/1 and says why; the store is
/// then consistent again (a reopen without the flag succeeds).
#[test]
fn lost_store_log_starts_over_only_when_asked() {
    let (_tmp, dir) = test_dir("startover");
    store_with_five(&dir);
    std::fs::write(store_file(&dir), b"").unwrap();
    let (s, w) = FileStore::open_with(&dir, SyncPolicy::Os, 77, OnLostLog::StartOver).unwrap();
    let w = w.expect("a warning saying the store started over");
    assert!(w.to_string().contains("started over"), "{w}");
    assert_eq!((s.next_sender_seq(), s.next_target_seq()), (1, 1));
    assert_eq!(s.creation_time(), 77);
    drop(s);
    let s = open(&dir);
    assert_eq!(s.next_sender_seq(), 1);
}

/// A reset whose store.seqnums update never happened (crash between the log's rename
/// and the seqnums write) is not mistaken for a lost log; nor is a store written before
/// store.seqnums existed.
#[test]
fn reset_interrupted_before_seqnums_and_stores_without_seqnums_open() {
    let (_tmp, dir) = test_dir("resetcrash");
    store_with_five(&dir);
    let seqnums = std::fs::read(dir.join("store.seqnums")).unwrap();
    {
        let (mut s, _) = FileStore::open(&dir, SyncPolicy::Os, 0).unwrap();
        s.reset(1_000).unwrap();
    }
    std::fs::write(dir.join("store.seqnums"), &seqnums).unwrap();
    let (s, w) = FileStore::open(&dir, SyncPolicy::Os, 0).unwrap();
    assert!(w.is_none(), "{w:?}");
    assert_eq!((s.next_sender_seq(), s.creation_time()), (1, 1_000));
    drop(s);
    std::fs::remove_file(dir.join("store.seqnums")).unwrap();
    let s = open(&dir);
    assert_eq!(s.next_sender_seq(), 1);
    drop(s);
    assert!(dir.join("store.seqnums").exists(), "written on open");
}

/// `store.seqnums` costs no system call per loop turn: a `flush()` without a sync
/// leaves it alone until the log has grown by `SEQNUMS_EVERY` bytes; then it is written,
/// and a truncation below what it records is detected even though the store was never
/// dropped (as after `kill -9`).
#[test]
fn seqnums_is_written_every_so_many_bytes_not_every_flush() {
    let (_tmp, dir) = test_dir("seqnums-every");
    let seqnums = dir.join("store.seqnums");
    let mut s = open(&dir);
    let at_open = std::fs::read(&seqnums).unwrap();
    let start = s.log_len();
    let mut seq = 1;
    let mut send = |s: &mut FileStore| {
        s.save(seq, &msg(seq)).unwrap();
        s.incr_next_sender_seq().unwrap();
        s.incr_next_target_seq().unwrap();
        s.flush().unwrap();
        seq += 1;
    };
    send(&mut s);
    assert_eq!(
        std::fs::read(&seqnums).unwrap(),
        at_open,
        "one flush wrote it"
    );
    let mut half = 0;
    while std::fs::read(&seqnums).unwrap() == at_open {
        let len = s.log_len();
        assert!(
            len - start < SEQNUMS_EVERY,
            "not written after {} bytes",
            len - start
        );
        if half == 0 && len - start >= SEQNUMS_EVERY / 2 {
            half = len;
        }
        send(&mut s);
    }
    // A few more flushes past the slot: not recorded, and not needed to be.
    send(&mut s);
    send(&mut s);
    let next = s.next_sender_seq();
    s.end_as_if_killed(); // no clean stop: the slot written at the threshold is the record
    let log = std::fs::read(store_file(&dir)).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(store_file(&dir))
        .unwrap();
    f.set_len(half).unwrap();
    drop(f);
    let text = expect_lost(&dir, "log truncated below the recorded length");
    assert!(text.contains("truncated"), "{text}");
    // The log as the crash left it opens at the right numbers.
    std::fs::write(store_file(&dir), &log).unwrap();
    let s = open(&dir);
    assert_eq!(s.next_sender_seq(), next);
}

/// How a property case damages `store.log` after a clean stop.
#[derive(Debug, Clone)]
enum Damage {
    /// Zeros appended (the unwritten rest of a mapped window after a crash).
    Zeros(usize),
    /// Cut at a fraction (per mille) of the file.
    Cut(u16),
    /// Cut, then zeros appended (a crash in a flush, the window's zeros after it).
    CutThenZeros(u16, usize),
    /// One byte XORed with a non-zero mask, at a fraction (per mille) of the file.
    Flip(u16, u8),
    /// Bytes appended.
    Garbage(Vec<u8>),
}

fn damage() -> impl proptest::strategy::Strategy<Value = Damage> {
    use proptest::prelude::*;
    prop_oneof![
        (1usize..200_000).prop_map(Damage::Zeros),
        (0u16..1000).prop_map(Damage::Cut),
        ((0u16..1000), (1usize..100_000)).prop_map(|(c, z)| Damage::CutThenZeros(c, z)),
        ((0u16..1000), (1u8..=255)).prop_map(|(at, m)| Damage::Flip(at, m)),
        proptest::collection::vec(any::<u8>(), 1..64).prop_map(Damage::Garbage),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Recovery of a damaged log, with `store.seqnums` gone (so that only the log's own
    /// checks decide): it never panics; it either refuses (Corrupt) or opens with a
    /// prefix of the messages saved, byte for byte; zeros after the log (a crashed
    /// store's mapped window) are the end of the log, with every message and no warning.
    #[test]
    fn recovery_of_a_damaged_log_opens_a_prefix_or_refuses(
        n in 1u64..120,
        per_flush in 1u64..8,
        hurt in damage(),
    ) {
        let (_tmp, dir) = test_dir("prop");
        {
            let (mut s, _) = FileStore::open(&dir, SyncPolicy::Os, 5).unwrap();
            for seq in 1..=n {
                s.save(seq, &msg(seq)).unwrap();
                s.incr_next_sender_seq().unwrap();
                if seq % per_flush == 0 {
                    s.flush().unwrap();
                    s.prepare();
                }
            }
            s.flush().unwrap();
        }
        let path = store_file(&dir);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = |per_mille: u16, len: usize| len * usize::from(per_mille) / 1000;
        match &hurt {
            Damage::Zeros(z) => bytes.resize(bytes.len() + z, 0),
            Damage::Cut(c) => bytes.truncate(at(*c, bytes.len())),
            Damage::CutThenZeros(c, z) => {
                bytes.truncate(at(*c, bytes.len()));
                bytes.resize(bytes.len() + z, 0);
            }
            Damage::Flip(f, m) => {
                let i = at(*f, bytes.len()).min(bytes.len() - 1);
                bytes[i] ^= m;
            }
            Damage::Garbage(g) => bytes.extend_from_slice(g),
        }
        std::fs::write(&path, &bytes).unwrap();
        std::fs::remove_file(dir.join("store.seqnums")).unwrap();
        let originals: Vec<(u64, Vec<u8>)> = (1..=n).map(|q| (q, msg(q))).collect();
        match FileStore::open(&dir, SyncPolicy::Os, 6) {
            Ok((s, w)) => {
                let got = collect(&s, 1, u64::MAX);
                proptest::prop_assert!(got.len() as u64 <= n);
                proptest::prop_assert_eq!(&got[..], &originals[..got.len()]);
                if let Damage::Zeros(_) = hurt {
                    proptest::prop_assert_eq!(got.len() as u64, n);
                    proptest::prop_assert_eq!(w, None);
                    proptest::prop_assert_eq!(s.next_sender_seq(), n + 1);
                }
            }
            Err(StoreError::Corrupt { .. }) => {
                proptest::prop_assert!(!matches!(hurt, Damage::Zeros(_)));
            }
            Err(e) => proptest::prop_assert!(false, "unexpected error {e}"),
        }
    }
}
