//! The spool against real files in temporary directories.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use tickwire_spool::{
    Appender, Config, DamageReason, Durable, Lsn, RecoveryReport, Spool, SyncPolicy,
};

fn open(config: &Config) -> (Vec<(u64, Vec<u8>)>, RecoveryReport, Spool) {
    let mut got = Vec::new();
    let (spool, report) =
        Spool::open(config.clone(), |lsn, p| got.push((lsn.0, p.to_vec()))).unwrap();
    (got, report, spool)
}

/// Waits until everything up to `lsn` is durable, collecting failures.
fn wait_durable(app: &mut Appender, lsn: u64) -> Vec<Durable> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut failures = Vec::new();
    let mut through = 0;
    loop {
        while let Some(d) = app.poll_durable() {
            match d {
                Durable::Through(l) => through = l.0,
                f => failures.push(f),
            }
        }
        let failed_past = failures
            .iter()
            .any(|f| matches!(f, Durable::Failed { last, .. } if last.0 >= lsn));
        if through >= lsn || failed_past {
            return failures;
        }
        assert!(
            Instant::now() < deadline,
            "not durable in time: through {through}, want {lsn}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn payload(i: u64) -> Vec<u8> {
    let n = (i * 37 % 200) as usize;
    (0..n).map(|k| (i as u8).wrapping_add(k as u8)).collect()
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".log"))
        .collect();
    v.sort();
    v
}

#[test]
fn round_trip_across_segment_rolls_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.segment_size = 4096;
    let (got, report, spool) = open(&config);
    assert!(got.is_empty());
    assert_eq!(report.next_lsn, Lsn(1));
    let mut app = spool.start(Box::new(|| {})).unwrap();
    for i in 1..=1000u64 {
        assert_eq!(app.append(&payload(i)).unwrap(), Lsn(i));
        if i % 25 == 0 {
            app.flush();
        }
    }
    app.flush();
    assert!(wait_durable(&mut app, 1000).is_empty());
    let stats = app.stats();
    assert_eq!(stats.records_written, 1000);
    assert!(stats.segments > 5, "{stats:?}");
    assert!(stats.fsyncs >= stats.batches / 40, "{stats:?}");
    app.close().unwrap();
    let files = segment_files(dir.path());
    assert_eq!(files[0], "00000000000000000001.log");
    assert_eq!(files.len() as u64, stats.segments);
    let on_disk: u64 = files
        .iter()
        .map(|f| std::fs::metadata(dir.path().join(f)).unwrap().len())
        .sum();
    assert_eq!(on_disk, stats.bytes_on_disk);

    let (got, report, spool) = open(&config);
    assert_eq!(report.damaged, vec![]);
    assert_eq!(report.torn_tail, None);
    assert_eq!(got.len(), 1000);
    for (i, (lsn, p)) in got.iter().enumerate() {
        assert_eq!(*lsn, i as u64 + 1);
        assert_eq!(*p, payload(*lsn));
    }
    assert_eq!(spool.next_lsn(), Lsn(1001));
}

#[test]
fn lsn_continues_after_reopen_under_every_policy() {
    for policy in [
        SyncPolicy::Fsync,
        SyncPolicy::Interval(Duration::from_millis(5)),
        SyncPolicy::PageCache,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::new(dir.path());
        config.sync = policy;
        let mut expect = 1u64;
        for _round in 0..3 {
            let (got, report, spool) = open(&config);
            assert_eq!(got.len() as u64, expect - 1, "{policy:?}");
            assert_eq!(report.next_lsn, Lsn(expect));
            let mut app = spool.start(Box::new(|| {})).unwrap();
            for _ in 0..10 {
                assert_eq!(app.append(b"x").unwrap(), Lsn(expect));
                expect += 1;
            }
            drop(app); // Drop flushes and joins.
        }
        assert_eq!(segment_files(dir.path()), vec!["00000000000000000001.log"]);
    }
}

#[test]
fn wake_is_called_and_busy_bounds_the_hand_off() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.max_record = 100;
    config.max_pending_bytes = 1000;
    let (_, _, spool) = open(&config);
    let wakes = Arc::new(AtomicUsize::new(0));
    let w = wakes.clone();
    let mut app = spool
        .start(Box::new(move || {
            w.fetch_add(1, Ordering::Relaxed);
        }))
        .unwrap();
    assert_eq!(
        app.append(&[0; 101]),
        Err(tickwire_spool::AppendError::TooLarge { len: 101, max: 100 })
    );
    let mut ok = 0;
    while app.append(&[1; 100]).is_ok() {
        ok += 1;
    }
    assert_eq!(ok, 1000 / 116);
    assert_eq!(
        app.append(&[1; 100]),
        Err(tickwire_spool::AppendError::Busy)
    );
    app.flush();
    assert!(wait_durable(&mut app, ok).is_empty());
    assert!(wakes.load(Ordering::Relaxed) >= 1);
    assert_eq!(app.append(&[1; 100]).unwrap(), Lsn(ok + 1));
    app.close().unwrap();
    assert_eq!(
        app.append(b"late"),
        Err(tickwire_spool::AppendError::Failed)
    );
}

#[test]
fn reclaim_deletes_only_fully_below_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.segment_size = 1000;
    let (_, _, spool) = open(&config);
    let mut app = spool.start(Box::new(|| {})).unwrap();
    // Batches of 10 records of 84 bytes (100 on disk): one batch per segment.
    for i in 1..=50u64 {
        app.append(&[7; 84]).unwrap();
        if i % 10 == 0 {
            app.flush();
        }
    }
    wait_durable(&mut app, 50);
    assert_eq!(
        segment_files(dir.path()),
        ["1", "11", "21", "31", "41"].map(|n| format!("{:020}.log", n.parse::<u64>().unwrap()))
    );
    // 25 is inside segment 21..=30: segments 1 and 11 go, 21 stays.
    app.reclaim(Lsn(25));
    app.reclaim(Lsn(21)); // lower: no effect beyond the first request
    let deadline = Instant::now() + Duration::from_secs(10);
    while segment_files(dir.path()).len() != 3 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    // Never the current segment, whatever is asked.
    app.reclaim(Lsn(1000));
    app.close().unwrap();
    assert_eq!(segment_files(dir.path()), vec![format!("{:020}.log", 41)]);
    assert_eq!(app.stats().segments, 1);
    let (got, report, _) = open(&config);
    assert_eq!(got.first().map(|g| g.0), Some(41));
    assert_eq!(report.next_lsn, Lsn(51));
    assert!(report.damaged.is_empty());
}

#[test]
fn torn_tail_is_cut_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(dir.path());
    let (_, _, spool) = open(&config);
    let mut app = spool.start(Box::new(|| {})).unwrap();
    for i in 1..=5 {
        app.append(&payload(i)).unwrap();
    }
    app.close().unwrap();
    let seg = dir.path().join(format!("{:020}.log", 1));
    let len = std::fs::metadata(&seg).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len - 3).unwrap();
    let (got, report, spool) = open(&config);
    assert_eq!(got.len(), 4);
    let tail = report.torn_tail.unwrap();
    assert_eq!(tail.bytes_cut, 16 + payload(5).len() as u64 - 3);
    assert_eq!(spool.next_lsn(), Lsn(5));
    let mut app = spool.start(Box::new(|| {})).unwrap();
    assert_eq!(app.append(b"again").unwrap(), Lsn(5));
    app.close().unwrap();
    let (got, report, _) = open(&config);
    assert_eq!(got.last().unwrap(), &(5, b"again".to_vec()));
    assert!(report.damaged.is_empty() && report.torn_tail.is_none());
}

/// Records longer than a reopening spool reads (a router restarted with a smaller
/// --max-frame) are neither cut as a torn tail nor skipped as damage: the open fails,
/// naming the record, and the file is untouched; with the old limit they come back
/// (hostile-input pass: three acknowledged messages were cut at the restart).
#[test]
fn a_record_longer_than_the_reader_takes_fails_the_open_and_cuts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.max_record = 64 << 10;
    let (_, _, spool) = open(&config);
    let mut app = spool.start(Box::new(|| {})).unwrap();
    app.append(b"small").unwrap();
    for _ in 0..3 {
        app.append(&vec![7u8; 40_000]).unwrap();
    }
    app.close().unwrap();
    let seg = dir.path().join(format!("{:020}.log", 1));
    let len = std::fs::metadata(&seg).unwrap().len();
    let mut smaller = config.clone();
    smaller.max_record = 32 << 10;
    let Err(e) = Spool::open(smaller, |_, _| {}) else {
        panic!("opened")
    };
    assert!(
        matches!(
            e,
            tickwire_spool::Error::RecordTooLarge {
                len: 40_000,
                max_record: 32768,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("more than the 32768 this spool reads"),
        "{e}"
    );
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), len, "nothing cut");
    let (got, report, _) = open(&config);
    assert_eq!(got.len(), 4);
    assert!(report.damaged.is_empty() && report.torn_tail.is_none());
}

#[test]
fn mid_log_damage_costs_only_the_damaged_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.segment_size = 500;
    let (_, _, spool) = open(&config);
    let mut app = spool.start(Box::new(|| {})).unwrap();
    for i in 1..=30u64 {
        app.append(&[i as u8; 34]).unwrap(); // 50 bytes on disk
        if i % 5 == 0 {
            app.flush();
        }
    }
    app.close().unwrap();
    // Segment 1 holds 1..=10; flip a payload byte of record 3.
    let seg = dir.path().join(format!("{:020}.log", 1));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[2 * 50 + 20] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    let (got, report, spool) = open(&config);
    // Only the damaged record is lost: recovery resynchronises on record 4.
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    assert_eq!(report.damaged[0].offset, 100);
    assert_eq!(report.damaged[0].reason, DamageReason::BadChecksum);
    let lsns: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(lsns, [1, 2].into_iter().chain(4..=30).collect::<Vec<_>>());
    assert_eq!(spool.next_lsn(), Lsn(31));
}

#[test]
fn damage_in_the_last_segment_moves_appends_to_a_new_segment() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(dir.path());
    let (_, _, spool) = open(&config);
    let mut app = spool.start(Box::new(|| {})).unwrap();
    for _ in 1..=10u64 {
        app.append(&[9; 34]).unwrap();
    }
    app.close().unwrap();
    let seg = dir.path().join(format!("{:020}.log", 1));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[4 * 50 + 30] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    let (got, report, spool) = open(&config);
    // Record 5 is damaged; 1-4 and 6-10 are recovered.
    assert_eq!(got.len(), 9);
    assert!(got.iter().all(|g| g.0 != 5));
    assert!(report.torn_tail.is_none());
    assert_eq!(report.damaged.len(), 1);
    assert_eq!(
        spool.next_lsn(),
        Lsn(11),
        "numbers past the damage are never reused"
    );
    let mut app = spool.start(Box::new(|| {})).unwrap();
    assert_eq!(app.append(b"new").unwrap(), Lsn(11));
    app.close().unwrap();
    assert_eq!(segment_files(dir.path()).len(), 2);
    // The damaged segment is left as it was (for an operator), still reported.
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
}

#[test]
fn garbage_and_unrelated_files_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README"), b"not a segment").unwrap();
    std::fs::write(dir.path().join(format!("{:020}.log", 1)), [0xFFu8; 100]).unwrap();
    std::fs::write(dir.path().join(format!("{:020}.log", 50)), [0u8; 3]).unwrap();
    let config = Config::new(dir.path());
    let (got, report, spool) = open(&config);
    assert!(got.is_empty());
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    assert_eq!(report.torn_tail.as_ref().unwrap().bytes_cut, 3);
    assert_eq!(spool.next_lsn(), Lsn(50));
}

#[test]
fn invalid_config_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.max_pending_bytes = 10;
    assert!(matches!(
        Spool::open(config, |_, _| {}),
        Err(tickwire_spool::Error::Config(_))
    ));
}

/// A symbolic link named like a segment, to a file outside the spool: refused, and the
/// file it points to untouched (hostile-input pass: read as the last segment, its
/// target was truncated as a "torn tail").
#[test]
fn a_segment_that_is_a_symbolic_link_is_refused_and_its_target_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("precious.txt");
    std::fs::write(&victim, "precious data\n").unwrap();
    let config = Config::new(dir.path());
    let (_, _, spool) = open(&config);
    let mut app = spool.start(Box::new(|| {})).unwrap();
    app.append(b"one").unwrap();
    app.close().unwrap();
    let path = dir.path().join(format!("{:020}.log", 100));
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    let e = Spool::open(config, |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("a symbolic link (not followed)"), "{e}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious data\n");
}

/// Hostile-input probe: a FIFO named like a segment hung the start forever (in the
/// open, without a log line), and a link to a device read as an empty segment. Each
/// refuses the open at once, naming the file.
#[test]
fn a_segment_that_is_not_a_regular_file_is_refused_at_once() {
    for kind in ["fifo", "device"] {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new(dir.path());
        let (_, _, spool) = open(&config);
        let mut app = spool.start(Box::new(|| {})).unwrap();
        app.append(b"one").unwrap();
        app.close().unwrap();
        let path = dir.path().join(format!("{:020}.log", 7));
        match kind {
            "fifo" => {
                let st = std::process::Command::new("mkfifo")
                    .arg(&path)
                    .status()
                    .unwrap();
                assert!(st.success());
            }
            _ => std::os::unix::fs::symlink("/dev/zero", &path).unwrap(),
        }
        let t0 = Instant::now();
        let e = Spool::open(config.clone(), |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(
            (e.contains("not a regular file") || e.contains("a symbolic link (not followed)"))
                && e.contains(&format!("{:020}.log", 7)),
            "{kind}: {e}"
        );
    }
}

/// Hostile-input probe: an empty file named 18446744073709551615.log (a `touch`) made
/// every later append wait forever. A name beyond what a spool reaches is not ours:
/// left alone, and the spool goes on.
#[test]
fn a_file_named_beyond_the_last_record_number_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(dir.path());
    let (_, _, spool) = open(&config);
    let mut app = spool.start(Box::new(|| {})).unwrap();
    app.append(b"one").unwrap();
    app.close().unwrap();
    std::fs::write(dir.path().join("18446744073709551615.log"), b"").unwrap();
    let (got, _, spool) = open(&config);
    assert_eq!(got.len(), 1);
    assert_eq!(spool.next_lsn(), Lsn(2));
    let mut app = spool.start(Box::new(|| {})).unwrap();
    assert_eq!(app.append(b"two").unwrap(), Lsn(2));
    app.flush();
    assert!(wait_durable(&mut app, 2).is_empty());
    app.close().unwrap();
    let (got, _, _) = open(&config);
    assert_eq!(got.len(), 2);
}
